//! A throw-away PKI made with rcgen: [`Ca`] signs [`Leaf`] certificates, and [`Pki`]
//! writes a CA and the usual server and client certificates to a directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A self-signed CA named `common_name`.
    pub fn new(common_name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("a self-signed CA");
        Ca { issuer }
    }

    /// Its certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Its certificate, DER.
    pub fn der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// A certificate for `sans` (DNS names or IP addresses) named `common_name`, signed
    /// by this CA, valid now.
    pub fn leaf(&self, common_name: &str, sans: &[&str]) -> Leaf {
        self.sign(common_name, sans, false)
    }

    /// [`Ca::leaf`], expired since 2021.
    pub fn expired_leaf(&self, common_name: &str, sans: &[&str]) -> Leaf {
        self.sign(common_name, sans, true)
    }

    fn sign(&self, common_name: &str, sans: &[&str], expired: bool) -> Leaf {
        let key = KeyPair::generate().expect("a key");
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).expect("certificate params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
    /// The certificate, DER.
    pub der: Vec<u8>,
}

impl Leaf {
    /// Writes the certificate to `dir/cert_file` and the key to `dir/key_file`: the
    /// key first, as a rotation tool does.
    pub fn write(&self, dir: &Path, cert_file: &str, key_file: &str) {
        write(&dir.join(key_file), &self.key_pem);
        write(&dir.join(cert_file), &self.cert_pem);
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A CA and certificates in a fresh temporary directory: `ca.pem`; `server.pem` and
/// `server.key` for `localhost` and `127.0.0.1`; `client.pem` and `client.key` for
/// `worker-0`. [`Pki::add`] writes more.
#[derive(Debug)]
pub struct Pki {
    dir: PathBuf,
    ca: Ca,
}

impl Pki {
    /// Makes them, the CA named `ca_name`.
    pub fn new(ca_name: &str) -> Pki {
        let pki = Pki {
            dir: crate::temp_dir("pki"),
            ca: Ca::new(ca_name),
        };
        write(&pki.dir.join("ca.pem"), &pki.ca.pem());
        pki.add(
            "server",
            &pki.ca.leaf("server", &["localhost", "127.0.0.1"]),
        );
        pki.add("client", &pki.ca.leaf("client", &["worker-0"]));
        pki
    }

    /// Writes `leaf` as `NAME.pem` and `NAME.key`.
    pub fn add(&self, name: &str, leaf: &Leaf) {
        leaf.write(&self.dir, &format!("{name}.pem"), &format!("{name}.key"));
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// A file's path, as a string for a config or a command line.
    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// The CA certificate, PEM bytes.
    pub fn ca_pem(&self) -> Vec<u8> {
        self.ca.pem().into_bytes()
    }
}
