//! Each replica's link to the API server: a TCP proxy on a local port of its
//! own, which the soak can cut without touching the machine's firewall. A
//! cut link is a black hole, not a refusal: connections stay open, bytes in
//! flight wait (as TCP retransmits them) and a new connection is accepted
//! but never reaches the server, until the link is restored.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct Link {
    /// The local address the replica's kubeconfig points at.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
}

impl Link {
    /// Listens on 127.0.0.1 and forwards every connection to `upstream`, on threads of its own.
    pub fn open(upstream: SocketAddr) -> std::io::Result<Link> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let link_cut = cut.clone();
        std::thread::spawn(move || {
            for inbound in listener.incoming().flatten() {
                let cut = link_cut.clone();
                std::thread::spawn(move || {
                    wait_while(&cut);
                    let Ok(outbound) = TcpStream::connect(upstream) else { return };
                    let (Ok(i2), Ok(o2)) = (inbound.try_clone(), outbound.try_clone()) else { return };
                    let back = cut.clone();
                    std::thread::spawn(move || pipe(o2, i2, &back));
                    pipe(inbound, outbound, &cut);
                });
            }
        });
        Ok(Link { addr, cut })
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

fn wait_while(cut: &AtomicBool) {
    while cut.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Copies `from` to `to` until either ends, holding what it read while the link is cut.
fn pipe(mut from: TcpStream, mut to: TcpStream, cut: &AtomicBool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                wait_while(cut);
                if to.write_all(&buf[..n]).is_err() {
                    let _ = from.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
    }
}

/// `kubeconfig` with its server's address replaced by `addr`, and the server's
/// address it named (`https://127.0.0.1:PORT`).
pub fn redirect(kubeconfig: &str, addr: SocketAddr) -> Option<(String, SocketAddr)> {
    let line = kubeconfig.lines().find(|l| l.trim_start().starts_with("server: "))?;
    let url = line.trim_start().strip_prefix("server: ")?.trim().trim_matches('"');
    let upstream: SocketAddr = url.strip_prefix("https://")?.trim_end_matches('/').parse().ok()?;
    let text = kubeconfig.replacen(url, &format!("https://{addr}"), 1);
    Some((text, upstream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_points_the_kubeconfig_at_the_link() {
        let kc = "clusters:\n- cluster:\n    certificate-authority-data: X\n    server: https://127.0.0.1:44531\n  name: local\n";
        let (text, upstream) = redirect(kc, "127.0.0.1:5000".parse().unwrap()).unwrap();
        assert_eq!(upstream, "127.0.0.1:44531".parse().unwrap());
        assert!(text.contains("    server: https://127.0.0.1:5000\n") && !text.contains("44531"), "{text}");
    }

    #[test]
    fn a_cut_link_holds_the_bytes_until_it_is_restored() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let link = Link::open(server.local_addr().unwrap()).unwrap();
        let mut client = TcpStream::connect(link.addr).unwrap();
        let (mut upstream, _) = server.accept().unwrap();
        client.write_all(b"a").unwrap();
        let mut got = [0u8; 1];
        upstream.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"a");
        link.set_cut(true);
        client.write_all(b"b").unwrap();
        upstream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert!(upstream.read_exact(&mut got).is_err(), "a byte crossed a cut link");
        link.set_cut(false);
        upstream.set_read_timeout(None).unwrap();
        upstream.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"b");
    }
}
