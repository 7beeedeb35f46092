//! Compares every engine family with the seed catalog's own text, character for character.
//!
//! The seed (`002_383760d4258609cb.txt`, vendored under `tests/seed/`) prints
//! `WORKER_FAMILIES` and `STATUS_FAMILIES` as Python dict reprs; this test parses those
//! reprs and checks names, kinds, help strings, labels and buckets of every entry, and
//! that the two Rust lists hold exactly the seed's keys. When `HIGGSMETER_SEEDS_DIR`
//! names a folder holding the seeds as they were received, the vendored copy must also
//! equal the original there.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use higgsmeter_catalog::{
    CONDUCTOR_REQUEST_STATES, Family, Kind, STATUS_FAMILIES, STATUS_INTERVAL_S,
    TRANSFER_API_SERVER, WORKER_ACTIVITY_TIME, WORKER_CURRENT_STATE, WORKER_FAMILIES,
};

const SEED: &str = include_str!("seed/002_383760d4258609cb.txt");
const PY_SEED: &str = include_str!("seed/000_7116373bdabb107a.txt");

#[derive(Debug, PartialEq)]
enum Py {
    Str(String),
    Num(f64),
    Tuple(Vec<Py>),
    Dict(Vec<(Py, Py)>),
    Call(String, Vec<(String, Py)>),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn value(&mut self) -> Py {
        self.ws();
        match self.s[self.i] {
            q @ (b'\'' | b'"') => {
                self.i += 1;
                let mut out = Vec::new();
                while self.s[self.i] != q {
                    if self.s[self.i] == b'\\' {
                        self.i += 1;
                    }
                    out.push(self.s[self.i]);
                    self.i += 1;
                }
                self.i += 1;
                Py::Str(String::from_utf8(out).unwrap())
            }
            b'(' => {
                self.i += 1;
                let mut items = Vec::new();
                while !self.eat(b')') {
                    items.push(self.value());
                    self.eat(b',');
                }
                Py::Tuple(items)
            }
            b'{' => {
                self.i += 1;
                let mut items = Vec::new();
                while !self.eat(b'}') {
                    let k = self.value();
                    assert!(self.eat(b':'));
                    let v = self.value();
                    items.push((k, v));
                    self.eat(b',');
                }
                Py::Dict(items)
            }
            c if c.is_ascii_digit() || c == b'-' => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_alphanumeric() || b".-+".contains(&self.s[self.i]))
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Py::Num(text.parse().unwrap())
            }
            _ => {
                let start = self.i;
                while self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_' {
                    self.i += 1;
                }
                let name = std::str::from_utf8(&self.s[start..self.i])
                    .unwrap()
                    .to_owned();
                assert!(self.eat(b'('), "expected a call after {name}");
                let mut kwargs = Vec::new();
                while !self.eat(b')') {
                    self.ws();
                    let start = self.i;
                    while self.s[self.i] != b'=' {
                        self.i += 1;
                    }
                    let key = std::str::from_utf8(&self.s[start..self.i])
                        .unwrap()
                        .to_owned();
                    self.i += 1;
                    kwargs.push((key, self.value()));
                    self.eat(b',');
                }
                Py::Call(name, kwargs)
            }
        }
    }
}

fn seed_dict(name: &str) -> Vec<(String, Vec<(String, Py)>)> {
    let marker = format!("{name}: dict[str, Family] = ");
    let at = SEED.find(&marker).expect("seed lists the dict") + marker.len();
    let mut parser = Parser {
        s: &SEED.as_bytes()[at..],
        i: 0,
    };
    let Py::Dict(items) = parser.value() else {
        panic!("{name} is not a dict")
    };
    items
        .into_iter()
        .map(|(k, v)| match (k, v) {
            (Py::Str(k), Py::Call(call, kwargs)) if call == "Family" => (k, kwargs),
            other => panic!("unexpected entry {other:?}"),
        })
        .collect()
}

fn kwarg<'a>(kwargs: &'a [(String, Py)], key: &str) -> Option<&'a Py> {
    kwargs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn check_group(seed_name: &str, ours: &[Family]) {
    let seed = seed_dict(seed_name);
    let seed_names: Vec<&str> = seed.iter().map(|(k, _)| k.as_str()).collect();
    let our_names: Vec<&str> = ours.iter().map(|f| f.name).collect();
    assert_eq!(
        our_names, seed_names,
        "{seed_name}: same families in the same order"
    );
    for ((key, kwargs), family) in seed.iter().zip(ours) {
        assert_eq!(
            kwarg(kwargs, "name"),
            Some(&Py::Str(key.clone())),
            "{key}: name"
        );
        assert_eq!(family.name, key);
        let kind = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        assert_eq!(
            kwarg(kwargs, "kind"),
            Some(&Py::Str(kind.into())),
            "{key}: kind"
        );
        assert_eq!(family.kind.as_str(), kind);
        assert_eq!(
            kwarg(kwargs, "help"),
            Some(&Py::Str(family.help.into())),
            "{key}: help"
        );
        let labels = Py::Tuple(family.labels.iter().map(|l| Py::Str((*l).into())).collect());
        assert_eq!(kwarg(kwargs, "labels"), Some(&labels), "{key}: labels");
        let buckets = Py::Tuple(family.buckets.iter().map(|b| Py::Num(*b)).collect());
        assert_eq!(kwarg(kwargs, "buckets"), Some(&buckets), "{key}: buckets");
        if family.kind == Kind::Histogram {
            assert!(
                family.buckets.windows(2).all(|w| w[0] < w[1]),
                "{key}: sorted"
            );
        } else {
            assert!(
                family.buckets.is_empty(),
                "{key}: only histograms have buckets"
            );
        }
    }
}

#[test]
fn worker_families_match_the_seed() {
    check_group("WORKER_FAMILIES", WORKER_FAMILIES);
}

#[test]
fn status_families_match_the_seed() {
    check_group("STATUS_FAMILIES", STATUS_FAMILIES);
}

#[test]
fn module_constants_match_the_seed() {
    assert!(SEED.contains("STATUS_INTERVAL_S = 1.0#"));
    assert_eq!(STATUS_INTERVAL_S, 1.0);
    assert!(SEED.contains(&format!("TRANSFER_API_SERVER = '{TRANSFER_API_SERVER}'#")));
    let states = CONDUCTOR_REQUEST_STATES
        .map(|s| format!("'{s}'"))
        .join(", ");
    assert!(SEED.contains(&format!("CONDUCTOR_REQUEST_STATES = ({states})#")));
}

#[test]
fn activity_families_match_the_python_higgsmeter() {
    assert!(PY_SEED.contains(&format!("{} (Counter)", WORKER_ACTIVITY_TIME.name)));
    assert!(PY_SEED.contains(&format!("{} (Gauge)", WORKER_CURRENT_STATE.name)));
    assert_eq!(WORKER_ACTIVITY_TIME.labels, ["state", "operation"]);
    assert!(WORKER_CURRENT_STATE.labels.is_empty());
    // The Python package's help texts (tracker.py of higgsmeter 0.1.1).
    assert_eq!(
        WORKER_ACTIVITY_TIME.help,
        "Total seconds spent in each state and operation"
    );
    for code in [
        "0=Idle",
        "1=IO",
        "2=CPU",
        "3=GPU",
        "4=Warmup",
        "5=Startup",
        "6=Shutdown",
    ] {
        assert!(
            WORKER_CURRENT_STATE.help.contains(code),
            "help lists {code}"
        );
    }
}

#[test]
fn vendored_seed_equals_the_original() {
    // The repository holds the vendored copy only; the originals live outside it.
    let Some(dir) = std::env::var_os("HIGGSMETER_SEEDS_DIR") else {
        eprintln!("HIGGSMETER_SEEDS_DIR is not set; comparing against the vendored copy only");
        return;
    };
    let original = std::path::Path::new(&dir).join("002_383760d4258609cb.txt");
    match std::fs::read_to_string(&original) {
        Ok(original) => assert_eq!(original, SEED, "tests/seed/ is a stale copy"),
        Err(e) => panic!("HIGGSMETER_SEEDS_DIR: {}: {e}", original.display()),
    }
}

#[test]
fn names_are_unique_and_valid_prometheus_names() {
    let mut seen = std::collections::BTreeSet::new();
    for group in higgsmeter_catalog::ALL_FAMILY_GROUPS {
        for f in group.iter() {
            let ok = f.name.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            });
            assert!(ok, "{}: not a valid metric name", f.name);
            if seen.insert(f.name) {
                continue;
            }
            // A name may appear in several groups only as the same family.
            assert_eq!(
                higgsmeter_catalog::find(f.name),
                Some(f),
                "{} differs between groups",
                f.name
            );
        }
    }
}
