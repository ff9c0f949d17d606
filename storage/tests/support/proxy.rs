//! A TCP proxy in front of the S3 server whose behaviour a test switches at any
//! moment: pass bytes through, refuse connections, hang (accept and never
//! answer), trickle bytes slowly, or reset connections partway through a
//! response. Plain threads and sockets, so the faults are the kernel's own: a
//! refused connect, an RST, a peer that stops answering. Shared by the storage
//! tests, the server's fault suite and the cluster bench through `#[path]`.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Bytes pass both ways.
    Pass,
    /// New connections are refused (nothing listens); open ones are cut.
    Refuse,
    /// Connections are accepted and requests read, but nothing is answered;
    /// open ones stall. When the hang ends, the stalled connections are closed.
    Hang,
    /// Answers trickle at this many bytes per second.
    Slow(u64),
    /// Each connection is reset (RST) after this many bytes of answers.
    ResetAfter(u64),
}

struct State {
    mode: Mutex<Mode>,
    /// Bumped when open connections must end (refuse, end of a hang).
    epoch: AtomicU64,
    stop: AtomicBool,
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// Whether the port is listening now.
    listening: AtomicBool,
}

impl State {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }
}

/// A proxy on a loopback port forwarding to `upstream`; stopped on drop.
pub struct FaultProxy {
    port: u16,
    state: Arc<State>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State {
            mode: Mutex::new(Mode::Pass),
            epoch: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            listening: AtomicBool::new(true),
        });
        let upstream: SocketAddr = ([127, 0, 0, 1], upstream).into();
        let st = state.clone();
        let acceptor = std::thread::spawn(move || accept_loop(Some(listener), port, upstream, st));
        FaultProxy {
            port,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Switches the behaviour; takes effect at once for new and open
    /// connections.
    pub fn set(&self, mode: Mode) {
        let before = std::mem::replace(&mut *self.state.mode.lock().unwrap(), mode);
        if mode == Mode::Refuse || (before == Mode::Hang && mode != Mode::Hang) {
            self.state.epoch.fetch_add(1, Ordering::SeqCst);
        }
        // Returns once the port refuses or listens, as asked.
        let want = mode != Mode::Refuse;
        for _ in 0..500 {
            if self.state.listening.load(Ordering::SeqCst) == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.epoch.fetch_add(1, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(mut listener: Option<TcpListener>, port: u16, upstream: SocketAddr, st: Arc<State>) {
    while !st.stop.load(Ordering::SeqCst) {
        let mode = st.mode();
        if mode == Mode::Refuse {
            // Nothing listens: connects get an RST from the kernel.
            listener = None;
            st.listening.store(false, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let Some(l) = listener.as_ref() else {
            listener = TcpListener::bind(("127.0.0.1", port)).ok();
            if let Some(l) = &listener {
                let _ = l.set_nonblocking(true);
                st.listening.store(true, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = l.set_nonblocking(true);
        match l.accept() {
            Ok((client, _)) => {
                st.accepted.fetch_add(1, Ordering::Relaxed);
                let st = st.clone();
                std::thread::spawn(move || serve(client, upstream, st));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// One client connection: held while hanging, else paired with an upstream one.
fn serve(client: TcpStream, upstream: SocketAddr, st: Arc<State>) {
    let born = st.epoch.load(Ordering::SeqCst);
    let _ = client.set_nonblocking(false);
    let _ = client.set_read_timeout(Some(Duration::from_millis(20)));
    // Accepted during a hang: read and drop whatever comes, answer nothing.
    let mut sink = [0u8; 16 << 10];
    let mut c = &client;
    while st.mode() == Mode::Hang && st.epoch.load(Ordering::SeqCst) == born {
        if let Ok(0) = c.read(&mut sink) {
            return;
        }
    }
    if st.epoch.load(Ordering::SeqCst) != born {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let _ = server.set_read_timeout(Some(Duration::from_millis(20)));
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => return,
    };
    let cut = Arc::new(AtomicBool::new(false));
    let (up_state, up_cut) = (st.clone(), cut.clone());
    let up = std::thread::spawn(move || pump(c2, s2, up_state, born, &up_cut, false));
    pump(server, client, st, born, &cut, true);
    let _ = up.join();
}

/// Copies `from` → `to` as the mode allows; `answers` is the server → client
/// direction (the one slowed and reset).
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    st: Arc<State>,
    born: u64,
    cut: &AtomicBool,
    answers: bool,
) {
    let mut buf = [0u8; 16 << 10];
    let mut sent: u64 = 0;
    loop {
        if cut.load(Ordering::SeqCst) {
            return;
        }
        if st.epoch.load(Ordering::SeqCst) != born || st.stop.load(Ordering::SeqCst) {
            break;
        }
        let mode = st.mode();
        if mode == Mode::Hang {
            // Stall: read nothing, so the peer's writes back up.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let chunk = match mode {
            Mode::Slow(rate) if answers => (rate / 20).clamp(1, buf.len() as u64) as usize,
            _ => buf.len(),
        };
        let n = match from.read(&mut buf[..chunk]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        if let (Mode::ResetAfter(limit), true) = (mode, answers) {
            if sent + n as u64 > limit {
                let keep = limit.saturating_sub(sent) as usize;
                let _ = to.write_all(&buf[..keep]);
                reset(&to, cut);
                return;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n as u64;
        if let (Mode::Slow(_), true) = (mode, answers) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if st.epoch.load(Ordering::SeqCst) != born {
        // The client's socket is `to` here or `from` in the other direction.
        reset(if answers { &to } else { &from }, cut);
    } else {
        let _ = to.shutdown(Shutdown::Write);
    }
}

/// Makes the client's connection end with an RST rather than a FIN (what a
/// crashed peer or a middlebox dropping the connection sends): lingering 0,
/// it is reset when both directions' threads have dropped it, which `cut`
/// tells the other one to do.
fn reset(client: &TcpStream, cut: &AtomicBool) {
    let _ = socket2::SockRef::from(client).set_linger(Some(Duration::ZERO));
    cut.store(true, Ordering::SeqCst);
}
