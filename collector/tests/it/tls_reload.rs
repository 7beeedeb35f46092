//! A rotated certificate is picked up without a restart; a broken new one keeps the old
//! one, and the log says why. Real collector process, real TLS handshakes on 127.0.0.1
//! (rustls), certificates made with rcgen.

use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use crate::support::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls_pki_types::{CertificateDer, ServerName};

/// A leaf certificate for 127.0.0.1 signed by `ca`: (certificate PEM, key PEM, DER).
fn leaf(ca: &CertifiedIssuer<'_, KeyPair>, name: &str) -> (String, String, Vec<u8>) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.signed_by(&key, ca).expect("sign");
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

/// The certificate the server at `addr` presents, after a full handshake that trusts
/// `ca_pem`.
fn presented(addr: std::net::SocketAddr, ca_pem: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        let cert: CertificateDer<'static> = cert.expect("CA PEM");
        roots.add(cert).expect("CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("handshake");
    }
    conn.peer_certificates().expect("a certificate")[0].to_vec()
}

fn write(dir: &Path, cert: &str, key: &str) {
    // As a rotation tool does: the key first, then the certificate.
    std::fs::write(dir.join("server.key"), key).expect("write key");
    std::fs::write(dir.join("server.pem"), cert).expect("write cert");
}

#[test]
fn a_rotated_certificate_is_picked_up_and_a_broken_one_keeps_the_old() {
    let dir = temp_dir("tls-reload");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "reload CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("CA");
    let ca_pem = ca.pem();
    let (cert1, key1, der1) = leaf(&ca, "first");
    let (cert2, key2, der2) = leaf(&ca, "second");
    write(&dir, &cert1, &key1);
    let config = format!(
        "exporters:\n  prometheus:\n    tls:\n      cert_file: {0}/server.pem\n      key_file: {0}/server.key\n",
        dir.display()
    );
    std::fs::write(dir.join("collector.yaml"), config).expect("write config");
    let mut child = Command::new(collector_bin())
        .arg("--config")
        .arg(dir.join("collector.yaml"))
        .args(EPHEMERAL_PORTS)
        .arg("--storage")
        .arg("none")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the collector");
    // The log, line by line.
    let (log_tx, log) = mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if log_tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_log = |what: &str| loop {
        match log.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.contains(what) => return line,
            Ok(_) => {}
            Err(e) => panic!("no log line with `{what}`: {e}"),
        }
    };
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the startup line");
    let addrs = parse_listening(&line).unwrap_or_else(|| panic!("startup line: {line:?}"));
    let prometheus = addrs[2];
    assert_eq!(presented(prometheus, &ca_pem), der1);

    // A broken certificate (cut short mid-write): the old one stays, and the log says
    // why.
    std::fs::write(dir.join("server.pem"), &cert2[..cert2.len() / 2]).expect("write");
    let warning = wait_log("keeping the previous TLS certificate");
    assert!(warning.contains("exporters.prometheus.tls"), "{warning}");
    assert_eq!(presented(prometheus, &ca_pem), der1);

    // The rotation completes: new handshakes get the new certificate.
    write(&dir, &cert2, &key2);
    wait_log("reloaded the TLS certificate");
    assert_eq!(presented(prometheus, &ca_pem), der2);

    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    assert!(child.wait().expect("wait").success());
}
