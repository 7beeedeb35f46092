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
 *   FAKE_NVML_ECC_AGG_CORRECTED    aggregate corrected ECC errors (default 0)
 *   FAKE_NVML_ECC_AGG_UNCORRECTED  aggregate uncorrected ECC errors (default 0)
 *   FAKE_NVML_ENC_UTIL             encoder utilisation, percent (default 0)
 *   FAKE_NVML_DEC_UTIL             decoder utilisation, percent (default 0)
 *   FAKE_NVML_MEM_CLOCK_MHZ        memory clock, MHz (default 2619)
 *   FAKE_NVML_POWER_LIMIT_MW       enforced power limit, milliwatts (default 700000)
 *   FAKE_NVML_PSTATE               performance state (default 0)
 *   FAKE_NVML_FANS                 fans on the board (default 0)
 *   FAKE_NVML_FAN_SPEED            fan speed, percent (default 30)
 *   FAKE_NVML_PCIE_REPLAY          PCIe replay counter (default 0)
 *   FAKE_NVML_PCIE_GEN             current PCIe link generation (default 5)
 *   FAKE_NVML_PCIE_WIDTH           current PCIe link width (default 16)
 *   Field values (nvmlDeviceGetFieldValues):
 *   FAKE_NVML_MEM_TEMP             memory temperature, C (default 50 + index)
 *   FAKE_NVML_PCIE_TX_BYTES        PCIe bytes transmitted (default 1000000)
 *   FAKE_NVML_PCIE_RX_BYTES        PCIe bytes received (default 2000000)
 *   FAKE_NVML_RETIRED_SBE          pages retired for multiple single-bit errors (default 0)
 *   FAKE_NVML_RETIRED_DBE          pages retired for double-bit errors (default 0)
 *   FAKE_NVML_RETIRED_PENDING      1 if a page retirement is pending (default 0)
 *   FAKE_NVML_REMAP_COR            rows remapped for correctable errors (default 0)
 *   FAKE_NVML_REMAP_UNC            rows remapped for uncorrectable errors (default 0)
 *   FAKE_NVML_REMAP_PENDING        1 if a row remap is pending (default 0)
 *   FAKE_NVML_REMAP_FAILURE        1 if a row remap failed (default 0)
 *   FAKE_NVML_NVLINKS              NVLink links (default 0)
 *   FAKE_NVML_NVLINK_DOWN          link number reported down (default none)
 *   FAKE_NVML_NVLINK_TX_KIB        KiB sent per link (default 1000; link L adds L)
 *   FAKE_NVML_NVLINK_RX_KIB        KiB received per link (default 2000; link L adds L)
 *   FAKE_NVML_NVLINK_CRC           CRC errors per link (default 0; link L adds nothing)
 *   FAKE_NVML_NVLINK_REPLAY        replays per link (default 0)
 *   FAKE_NVML_NVLINK_RECOVERY      recoveries per link (default 0)
 *   GPU performance monitoring (ratios in percent, for every sample pair):
 *   FAKE_NVML_GPM_GRAPHICS / _SM / _OCCUPANCY / _TENSOR / _DRAM
 *                                  (defaults 40, 35, 20, 10, 25)
 *   XID events:
 *   FAKE_NVML_XID_FILE             a file of lines "<gpu index> <xid>"; nvmlEventSetWait_v2
 *                                  delivers each line once, in order, as a critical XID
 *                                  event of that GPU (if it is registered in the set)
 *   FAKE_NVML_NOT_SUPPORTED        comma list of readings that return NOT_SUPPORTED:
 *                                  util, memory, temperature, power, energy, clock, ecc,
 *                                  throttle, processes, ecc_aggregate, encoder, decoder,
 *                                  mem_clock, power_limit, pstate, fan, pcie_replay,
 *                                  pcie_link, mem_temp, pcie_bytes, retired_pages,
 *                                  remapped_rows, nvlink, gpm, xid
 *
 * Built with -DFAKE_NO_SHUTDOWN it lacks nvmlShutdown (the variant nvml-wrapper's Drop
 * would panic on); with -DFAKE_NO_INIT it lacks nvmlInit_v2 (not an NVML at all).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
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
    if (type == 2) { /* NVML_CLOCK_MEM */
        CHECK_SUPPORTED(device, "mem_clock");
        *clock = (unsigned int)value("MEM_CLOCK_MHZ", device->index, 2619);
        return NVML_SUCCESS;
    }
    CHECK_SUPPORTED(device, "clock");
    if (type != 1) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_CLOCK_SM */
    *clock = (unsigned int)value("SM_CLOCK_MHZ", device->index, 1980);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                         unsigned long long *count) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "ecc");
    if (counterType == 1) { /* NVML_AGGREGATE_ECC */
        CHECK_SUPPORTED(device, "ecc_aggregate");
        if (errorType == 0) *count = value("ECC_AGG_CORRECTED", device->index, 0);
        else if (errorType == 1) *count = value("ECC_AGG_UNCORRECTED", device->index, 0);
        else return NVML_ERROR_INVALID_ARGUMENT;
        return NVML_SUCCESS;
    }
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

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    CHECK_DEVICE(device);
    *index = device->index;
    return NVML_SUCCESS;
}

static nvmlReturn_t engine_util(nvmlDevice_t device, const char *reading, const char *field,
                                unsigned int *util, unsigned int *period) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, reading);
    *util = (unsigned int)value(field, device->index, 0);
    *period = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *util,
                                             unsigned int *period) {
    return engine_util(device, "encoder", "ENC_UTIL", util, period);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *util,
                                             unsigned int *period) {
    return engine_util(device, "decoder", "DEC_UTIL", util, period);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "power_limit");
    *limit = (unsigned int)value("POWER_LIMIT_MW", device->index, 700000);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *pstate) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "pstate");
    *pstate = (int)value("PSTATE", device->index, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *fans) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "fan");
    *fans = (unsigned int)value("FANS", device->index, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "fan");
    if (fan >= value("FANS", device->index, 0)) return NVML_ERROR_NOT_SUPPORTED;
    *speed = (unsigned int)value("FAN_SPEED", device->index, 30);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *count) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "pcie_replay");
    *count = (unsigned int)value("PCIE_REPLAY", device->index, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "pcie_link");
    *gen = (unsigned int)value("PCIE_GEN", device->index, 5);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "pcie_link");
    *width = (unsigned int)value("PCIE_WIDTH", device->index, 16);
    return NVML_SUCCESS;
}

/* ---- field values (nvml.h nvmlFieldValue_t) ---- */

typedef union {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

#define VALUE_TYPE_UNSIGNED_LONG_LONG 3
#define VALUE_TYPE_SIGNED_LONG_LONG 4

/* The NVLink variables of one device, read once per nvmlDeviceGetFieldValues call (a
 * call asks for 6 fields per link: reading the environment for each would make the fake,
 * not the meter, what the tick benchmark measures). */
struct nvlink_env {
    int unsupported;
    unsigned int links;
    unsigned long long tx, rx, replay, recovery, crc;
    long long down; /* -1: none */
};

static void read_nvlink_env(unsigned int index, struct nvlink_env *e) {
    const char *down = lookup("NVLINK_DOWN", index);
    e->unsupported = unsupported(index, "nvlink");
    e->links = (unsigned int)value("NVLINKS", index, 0);
    e->tx = value("NVLINK_TX_KIB", index, 1000);
    e->rx = value("NVLINK_RX_KIB", index, 2000);
    e->replay = value("NVLINK_REPLAY", index, 0);
    e->recovery = value("NVLINK_RECOVERY", index, 0);
    e->crc = value("NVLINK_CRC", index, 0);
    e->down = down ? (long long)strtoul(down, NULL, 0) : -1;
}

static nvmlReturn_t field(unsigned int index, const struct nvlink_env *nv, unsigned int id,
                          unsigned int scope, unsigned long long *out) {
    unsigned int links = nv->links;
    switch (id) {
    case 82: /* NVML_FI_DEV_MEMORY_TEMP */
        if (unsupported(index, "mem_temp")) return NVML_ERROR_NOT_SUPPORTED;
        *out = value("MEM_TEMP", index, 50 + index);
        return NVML_SUCCESS;
    case 91: /* NVML_FI_DEV_NVLINK_LINK_COUNT */
        if (nv->unsupported) return NVML_ERROR_NOT_SUPPORTED;
        *out = links;
        return NVML_SUCCESS;
    case 197: /* NVML_FI_DEV_PCIE_COUNT_TX_BYTES */
    case 198: /* NVML_FI_DEV_PCIE_COUNT_RX_BYTES */
        if (unsupported(index, "pcie_bytes")) return NVML_ERROR_NOT_SUPPORTED;
        *out = id == 197 ? value("PCIE_TX_BYTES", index, 1000000)
                         : value("PCIE_RX_BYTES", index, 2000000);
        return NVML_SUCCESS;
    case 29: /* NVML_FI_DEV_RETIRED_SBE */
    case 30: /* NVML_FI_DEV_RETIRED_DBE */
    case 31: /* NVML_FI_DEV_RETIRED_PENDING */
        if (unsupported(index, "retired_pages")) return NVML_ERROR_NOT_SUPPORTED;
        *out = value(id == 29 ? "RETIRED_SBE" : id == 30 ? "RETIRED_DBE" : "RETIRED_PENDING",
                     index, 0);
        return NVML_SUCCESS;
    case 142: /* NVML_FI_DEV_REMAPPED_COR */
    case 143: /* NVML_FI_DEV_REMAPPED_UNC */
    case 144: /* NVML_FI_DEV_REMAPPED_PENDING */
    case 145: /* NVML_FI_DEV_REMAPPED_FAILURE */
        if (unsupported(index, "remapped_rows")) return NVML_ERROR_NOT_SUPPORTED;
        *out = value(id == 142 ? "REMAP_COR" : id == 143 ? "REMAP_UNC"
                     : id == 144 ? "REMAP_PENDING" : "REMAP_FAILURE", index, 0);
        return NVML_SUCCESS;
    case 138: /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scope = link */
    case 139: /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX */
    case 161: /* NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY */
    case 162: /* NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY */
    case 163: /* NVML_FI_DEV_NVLINK_ERROR_DL_CRC */
    case 165: /* NVML_FI_DEV_NVLINK_GET_STATE */
        if (nv->unsupported) return NVML_ERROR_NOT_SUPPORTED;
        if (scope >= links) return NVML_ERROR_INVALID_ARGUMENT;
        switch (id) {
        case 138: *out = nv->tx + scope; break;
        case 139: *out = nv->rx + scope; break;
        case 161: *out = nv->replay; break;
        case 162: *out = nv->recovery; break;
        case 163: *out = nv->crc; break;
        default: *out = nv->down == (long long)scope ? 0 : 1;
        }
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    CHECK_DEVICE(device);
    if (count <= 0 || !values) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvlink_env nv;
    read_nvlink_env(device->index, &nv);
    for (int i = 0; i < count; i++) {
        unsigned long long v = 0;
        values[i].nvmlReturn =
            field(device->index, &nv, values[i].fieldId, values[i].scopeId, &v);
        values[i].timestamp = 0;
        values[i].latencyUsec = 0;
        /* The memory temperature is signed in NVML; the rest unsigned. */
        values[i].valueType = values[i].fieldId == 82 ? VALUE_TYPE_SIGNED_LONG_LONG
                                                      : VALUE_TYPE_UNSIGNED_LONG_LONG;
        values[i].value.ullVal = v;
    }
    return NVML_SUCCESS;
}

/* ---- GPU performance monitoring ---- */

typedef struct fake_gpm_sample { unsigned int index; } *nvmlGpmSample_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName; char *longName; char *unit; } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[210];
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    CHECK_DEVICE(device);
    support->isSupportedDevice = unsupported(device->index, "gpm") ? 0 : 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *sample = calloc(1, sizeof **sample);
    return *sample ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    free(sample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    CHECK_DEVICE(device);
    if (unsupported(device->index, "gpm")) return NVML_ERROR_NOT_SUPPORTED;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    sample->index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!request || !request->sample1 || !request->sample2 || request->numMetrics > 210)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int index = request->sample2->index;
    for (unsigned int i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *m = &request->metrics[i];
        m->nvmlReturn = NVML_SUCCESS;
        m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
        switch (m->metricId) {
        case 1: m->value = (double)value("GPM_GRAPHICS", index, 40); break;
        case 2: m->value = (double)value("GPM_SM", index, 35); break;
        case 3: m->value = (double)value("GPM_OCCUPANCY", index, 20); break;
        case 5: m->value = (double)value("GPM_TENSOR", index, 10); break;
        case 10: m->value = (double)value("GPM_DRAM", index, 25); break;
        default: m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; m->value = 0;
        }
    }
    return NVML_SUCCESS;
}

/* ---- events (critical XID only) ---- */

typedef struct fake_event_set { unsigned long long registered; } *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

#define EVENT_XID 8ULL

static pthread_mutex_t xid_lock = PTHREAD_MUTEX_INITIALIZER;
/* Lines of FAKE_NVML_XID_FILE already delivered (or skipped). */
static unsigned long xid_consumed = 0;

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "xid");
    *types = EVENT_XID;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set) {
    CHECK_DEVICE(device);
    CHECK_SUPPORTED(device, "xid");
    if (!set || types != EVENT_XID) return NVML_ERROR_INVALID_ARGUMENT;
    set->registered |= 1ULL << device->index;
    return NVML_SUCCESS;
}

/* The next undelivered line of the XID file for a registered device, if any. */
static int next_xid(nvmlEventSet_t set, unsigned int *gpu, unsigned long long *xid) {
    const char *path = getenv("FAKE_NVML_XID_FILE");
    if (!path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int found = 0;
    unsigned long line = 0;
    unsigned int g;
    unsigned long long x;
    pthread_mutex_lock(&xid_lock);
    while (fscanf(f, "%u %llu", &g, &x) == 2) {
        if (line++ < xid_consumed) continue;
        xid_consumed = line;
        if (g < MAX_DEVICES && (set->registered & (1ULL << g))) {
            *gpu = g;
            *xid = x;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&xid_lock);
    fclose(f);
    return found;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int waited = 0;; waited += 5) {
        unsigned int gpu;
        unsigned long long xid;
        if (next_xid(set, &gpu, &xid)) {
            devices[gpu].index = gpu;
            data->device = &devices[gpu];
            data->eventType = EVENT_XID;
            data->eventData = xid;
            data->gpuInstanceId = 0xFFFFFFFF;
            data->computeInstanceId = 0xFFFFFFFF;
            return NVML_SUCCESS;
        }
        if (waited >= timeoutms) return NVML_ERROR_TIMEOUT;
        struct timespec step = {0, 5 * 1000 * 1000};
        nanosleep(&step, NULL);
    }
}
