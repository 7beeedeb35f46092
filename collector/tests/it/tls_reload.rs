//! A rotated certificate is picked up without a restart; a broken new one keeps the old
//! one, and the log says why. Real collector process, real TLS handshakes on 127.0.0.1
//! (rustls), certificates made with rcgen.

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use higgsmeter_testkit::pki::{Ca, Leaf};
use rustls_pki_types::{CertificateDer, ServerName};

/// A leaf certificate for 127.0.0.1 signed by `ca`.
fn leaf(ca: &Ca, name: &str) -> Leaf {
    ca.leaf(name, &["127.0.0.1"])
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

#[test]
fn a_rotated_certificate_is_picked_up_and_a_broken_one_keeps_the_old() {
    let dir = temp_dir("tls-reload");
    let ca = Ca::new("reload CA");
    let ca_pem = ca.pem();
    let first = leaf(&ca, "first");
    let second = leaf(&ca, "second");
    // As a rotation tool does: the key first, then the certificate.
    first.write(&dir, "server.pem", "server.key");
    let config = format!(
        "exporters:\n  prometheus:\n    tls:\n      cert_file: {0}/server.pem\n      key_file: {0}/server.key\n",
        dir.display()
    );
    let collector = CollectorProcess::builder()
        .config(&config)
        .args(["--storage", "none"])
        .env("RUST_LOG", "info")
        .capture_stderr(None)
        .start();
    let wait_log = |what: &str| collector.wait_log_line(what, Duration::from_secs(30));
    let prometheus = collector.prometheus;
    assert_eq!(presented(prometheus, &ca_pem), first.der);

    // A broken certificate (cut short mid-write): the old one stays, and the log says
    // why.
    let cert2 = &second.cert_pem;
    std::fs::write(dir.join("server.pem"), &cert2[..cert2.len() / 2]).expect("write");
    let warning = wait_log("keeping the previous TLS certificate");
    assert!(warning.contains("exporters.prometheus.tls"), "{warning}");
    assert_eq!(presented(prometheus, &ca_pem), first.der);

    // The rotation completes: new handshakes get the new certificate.
    second.write(&dir, "server.pem", "server.key");
    wait_log("reloaded the TLS certificate");
    assert_eq!(presented(prometheus, &ca_pem), second.der);

    assert!(collector.terminate().success());
}
