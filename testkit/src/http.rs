//! A minimal HTTP/1.1 client on `std`: one request per connection (`Connection:
//! close`), a chunked answer decoded. Enough for Prometheus' API, readiness checks and
//! an SDK's `/metrics`; errors are returned, for tests that retry.

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET path` from `addr`: (status, body).
pub fn get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n"),
        b"",
    )
}

/// `POST path` to `addr` with `body` of `content_type`: (status, body).
pub fn post(
    addr: SocketAddr,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> io::Result<(u16, String)> {
    request(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ),
        body,
    )
}

/// Percent-encodes a query-string value.
pub fn url_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn request(addr: SocketAddr, head: &str, body: &[u8]) -> io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(head.as_bytes())?;
    stream.write_all(b"Connection: close\r\n\r\n")?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).map_err(|e| invalid(format!("not UTF-8: {e}")))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid(format!("no end of the headers: {text:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("no status: {head:?}")))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

/// A chunked body's data.
fn dechunk(mut rest: &str) -> io::Result<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest
            .split_once("\r\n")
            .ok_or_else(|| invalid("a chunk without its size line".into()))?;
        let size = size.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|e| invalid(format!("chunk size {size:?}: {e}")))?;
        if size == 0 {
            return Ok(out);
        }
        let data = after
            .get(..size)
            .ok_or_else(|| invalid("a chunk shorter than its size".into()))?;
        out.push_str(data);
        rest = after.get(size + 2..).unwrap_or("");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\n\r\n").expect("valid"),
            "hello, world"
        );
        assert!(dechunk("9\r\nshort\r\n").is_err());
    }

    #[test]
    fn url_encode_keeps_only_unreserved_characters() {
        assert_eq!(url_encode("up{job=\"a b\"}"), "up%7Bjob%3D%22a%20b%22%7D");
    }
}
