/*
 * A fake libnvidia-ml.so.1 for higgsmeter-nvml's tests and benchmark.
 *
 * It exports the NVML entry points nvml-wrapper 0.13 resolves and the meter calls,
 * with the real ABI (argument and struct layouts from nvml.h), so the real
 * nvml-wrapper code path runs against it. Values and failures come from environment
 * variables read at call time; a per-device variable FAKE_NVML_<FIELD>_<index> wins
 * over FAKE_NVML_<FIELD>, which wins over the built-in default:
 *
 *   FAKE_NVML_INIT_RESULT          nvmlReturn_t of nvmlInit_v2 (default 0 = success)
 *   FAKE_NVML_DEVICE_COUNT         devices (default 1, at most 64)
 *   FAKE_NVML_UTIL                 GPU utilisation, percent (default 50 + index)
 *   FAKE_NVML_MEM_TOTAL            bytes installed (default 143771090944)
 *   FAKE_NVML_MEM_USED             bytes used (default (index + 1) GiB)
 *   FAKE_NVML_TEMP                 degrees C (default 40 + index)
 *   FAKE_NVML_POWER_MW             milliwatts (default 100000 + 1000 * index)
 *   FAKE_NVML_ENERGY_MJ            millijoules since driver load (default 5000000)
 *   FAKE_NVML_SM_CLOCK_MHZ         MHz (default 1980)
 *   FAKE_NVML_ECC_CORRECTED        volatile corrected ECC errors (default 0)
 *   FAKE_NVML_ECC_UNCORRECTED      volatile uncorrected ECC errors (default 0)
 *   FAKE_NVML_THROTTLE             throttle-reason bit mask (default 0)
 *   FAKE_NVML_SELF_MEM             if set: the calling process (getpid()) is listed as a
 *                                  compute process using this many bytes
 *   FAKE_NVML_OTHER_PROCS          other compute processes listed (pids 1.., 1 GiB each;
 *                                  default 1)
 *   FAKE_NVML_CALL_LOG             if set: a file nvmlDeviceGetUtilizationRates appends
 *                                  one line "<index>" to at every call
 *   FAKE_NVML_NOT_SUPPORTED        comma list of readings that return NOT_SUPPORTED:
 *                                  util, memory, temperature, power, energy, clock, ecc,
 *                                  throttle, processes
 *
 * Built with -DFAKE_NO_SHUTDOWN it lacks nvmlShutdown (the variant nvml-wrapper's Drop
 * would panic on); with -DFAKE_NO_INIT it lacks nvmlInit_v2 (not an NVML at all).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_UNKNOWN 999

#define MAX_DEVICES 64

typedef struct fake_device { unsigned int index; } *nvmlDevice_t;

typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

static struct fake_device devices[MAX_DEVICES];
static int initialized = 0;

/* FAKE_NVML_<field>_<index>, else FAKE_NVML_<field>, else NULL. */
static const char *lookup(const char *field, unsigned int index) {
    char name[96];
    snprintf(name, sizeof name, "FAKE_NVML_%s_%u", field, index);
    const char *v = getenv(name);
    if (v) return v;
    snprintf(name, sizeof name, "FAKE_NVML_%s", field);
    return getenv(name);
}

static unsigned long long value(const char *field, unsigned int index, unsigned long long dflt) {
    const char *v = lookup(field, index);
    return v ? strtoull(v, NULL, 0) : dflt;
}

/* Whether `reading` is in the device's FAKE_NVML_NOT_SUPPORTED list. */
static int unsupported(unsigned int index, const char *reading) {
    const char *list = lookup("NOT_SUPPORTED", index);
    if (!list) return 0;
    size_t n = strlen(reading);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, reading, n) == 0) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

static unsigned int device_count(void) {
    unsigned long long n = value("DEVICE_COUNT", 0, 1);
    return n > MAX_DEVICES ? MAX_DEVICES : (unsigned int)n;
}

#define CHECK_DEVICE(dev) \
    do { \
        if (!initialized) return NVML_ERROR_UNINITIALIZED; \
        if (!(dev) || (dev)->index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT; \
    } while (0)

#define CHECK_SUPPORTED(dev, reading) \
    do { if (unsupported((dev)->index, reading)) return NVML_ERROR_NOT_SUPPORTED; } while (0)

#ifndef FAKE_NO_INIT
nvmlReturn_t nvmlInit_v2(void) {
    nvmlReturn_t r = (nvmlReturn_t)value("INIT_RESULT", 0, NVML_SUCCESS);
    if (r == NVML_SUCCESS) initialized = 1;
    return r;
}
#endif

#ifndef FAKE_NO_SHUTDOWN
nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}
#endif

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    snprintf(version, length, "550.54.15");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *count = device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    devices[index].index = index;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    CHECK_DEVICE(device);
    snprintf(name, length, "NVIDIA H200");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    CHECK_DEVICE(device);
    snprintf(uuid, length, "GPU-fa4e0000-0000-4000-8000-%012u", device->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    CHECK_DEVICE(device);
    const char *log = getenv("FAKE_NVML_CALL_LOG");
    if (log) {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "%u\n", device->index);
            fclose(f);
        }
    }
    CHECK_SUPPORTED(device, "util");
    u->gpu = (unsigned int)value("UTIL", device->index, 50 + device->index);
    u->memory = u->gpu / 2;
    return NVML_SUCCESS;
}

static void memory(nvmlDevice_t device, unsigned long long *total, unsigned long long *used) {
    *total = value("MEM_TOTAL", device->index, 143771090944ULL);
    *used = value("MEM_USED", device->index, (device->index + 1ULL) << 30);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "memory");
    memory(device, &m->total, &m->used);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "memory");
    if ((m->version >> 24) != 2) return NVML_ERROR_INVALID_ARGUMENT;
    memory(device, &m->total, &m->used);
    m->reserved = 0;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "temperature");
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)value("TEMP", device->index, 40 + device->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "power");
    *power = (unsigned int)value("POWER_MW", device->index, 100000 + 1000 * device->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "energy");
    *energy = value("ENERGY_MJ", device->index, 5000000);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "clock");
    if (type != 1) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_CLOCK_SM */
    *clock = (unsigned int)value("SM_CLOCK_MHZ", device->index, 1980);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                         unsigned long long *count) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "ecc");
    if (counterType != 0) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_VOLATILE_ECC */
    if (errorType == 0) *count = value("ECC_CORRECTED", device->index, 0);
    else if (errorType == 1) *count = value("ECC_UNCORRECTED", device->index, 0);
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                      unsigned long long *reasons) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "throttle");
    *reasons = value("THROTTLE", device->index, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "processes");
    const char *self = lookup("SELF_MEM", device->index);
    unsigned int others = (unsigned int)value("OTHER_PROCS", device->index, 1);
    unsigned int n = others + (self ? 1 : 0);
    if (!infos || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int i = 0;
    for (; i < others; i++) {
        infos[i].pid = i + 1;
        infos[i].usedGpuMemory = 1ULL << 30;
        infos[i].gpuInstanceId = 0xFFFFFFFF;
        infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    if (self) {
        infos[i].pid = (unsigned int)getpid();
        infos[i].usedGpuMemory = strtoull(self, NULL, 0);
        infos[i].gpuInstanceId = 0xFFFFFFFF;
        infos[i].computeInstanceId = 0xFFFFFFFF;
        i++;
    }
    *count = i;
    return NVML_SUCCESS;
}
