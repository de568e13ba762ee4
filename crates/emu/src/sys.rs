//! The few system calls std does not wrap: TUN creation, ppoll with a
//! nanosecond timeout, timer slack, signalfd, kill, socket buffer forcing,
//! entering a network namespace.
//! Each wrapper checks its arguments and returns io::Result.
#![allow(
    unsafe_code,
    reason = "libc calls (ioctl, ppoll, prctl, signalfd, kill, setsockopt, setns) with checked arguments; nothing else in the crate uses unsafe"
)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Create a TUN interface (IFF_TUN | IFF_NO_PI) named `name` and return the
/// non-blocking, close-on-exec file descriptor that carries its packets.
/// The interface disappears when the descriptor is closed.
pub fn open_tun(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || !name.is_ascii() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name `{name}`"),
        ));
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")?;
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq; IfReqFlags has the
    // layout of ifreq's name + flags members and its full 40-byte size.
    let rc = unsafe {
        libc::ioctl(
            f.as_raw_fd(),
            libc::TUNSETIFF as _,
            &mut req as *mut IfReqFlags,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// One entry for [`ppoll`].
pub type PollFd = libc::pollfd;

pub fn pollfd(fd: RawFd) -> PollFd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Wait until a descriptor is readable or `timeout` passes (None: forever).
/// EINTR counts as a timeout.
pub fn ppoll(fds: &mut [PollFd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = match &ts {
        Some(t) => t as *const libc::timespec,
        None => std::ptr::null(),
    };
    // SAFETY: fds is a valid, exclusively borrowed slice of pollfd; tsp is
    // null or points to a timespec that outlives the call; no sigmask.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

/// Set this thread's timer slack (how late the kernel may wake it).
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long by value.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Block SIGTERM, SIGINT and SIGHUP in the calling thread (call before any
/// thread is spawned so all inherit it) and return a signalfd that becomes
/// readable when one arrives.
pub fn termination_signalfd() -> io::Result<File> {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use;
    // the pointers passed are to locals that outlive the calls.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(File::from_raw_fd(fd))
    }
}

/// Send `sig` to `pid`. `sig == 0` only checks existence.
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    if pid == 0 || pid > i32::MAX as u32 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad pid"));
    }
    // SAFETY: kill takes plain integers; pid > 0 so it targets one process.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// SO_RCVBUFFORCE / SO_SNDBUFFORCE (root only; falls back to the plain
/// options, which the kernel caps at rmem_max/wmem_max).
pub fn force_socket_buffers(fd: RawFd, bytes: usize) {
    let v: libc::c_int = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        // SAFETY: setsockopt reads sizeof(c_int) bytes from &v.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                force,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            // SAFETY: as above.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    plain,
                    &v as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

/// Run the calling thread under SCHED_FIFO with `priority` (1..=99), so a
/// loaded machine does not delay packet release. The kernel's RT throttling
/// (sched_rt_runtime_us) still leaves other processes CPU time.
pub fn set_realtime(priority: u8) -> io::Result<()> {
    let p = libc::c_int::from(priority.clamp(1, 99));
    let param = libc::sched_param { sched_priority: p };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
    // Children (the `ip` commands of the teardown) get normal scheduling.
    const SCHED_RESET_ON_FORK: libc::c_int = 0x4000_0000;
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | SCHED_RESET_ON_FORK, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ask the kernel to send SIGTERM to this process when the thread that
/// spawned it exits (PR_SET_PDEATHSIG). Returns the parent pid seen after
/// arming, so the caller can detect a parent that was already gone.
pub fn term_with_parent() -> io::Result<u32> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number by value.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid has no arguments and cannot fail.
    Ok(unsafe { libc::getppid() } as u32)
}

/// Move the calling thread into the network namespace `ns` (an open
/// `/run/netns/<name>` file). Only for a thread made for it: the change
/// stays with the thread.
pub fn setns_net(ns: &File) -> io::Result<()> {
    // SAFETY: setns takes a descriptor we own (borrowed for the call) and
    // a constant namespace type.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An `AF_PACKET`/`SOCK_DGRAM` socket for every protocol (`ETH_P_ALL`) on
/// every interface of the calling thread's network namespace, non-blocking
/// and close-on-exec, keeping only the first `snaplen` bytes of each
/// packet's network layer (a one-instruction classic BPF filter returns
/// that length), with a receive buffer of `rcvbuf` bytes.
pub fn packet_socket(snaplen: u32, rcvbuf: usize) -> io::Result<File> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket takes plain integers.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(proto),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor we just opened and own from here on.
    let f = unsafe { File::from_raw_fd(fd) };
    let mut insn = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: snaplen,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: insn.as_mut_ptr(),
    };
    // SAFETY: SO_ATTACH_FILTER reads a sock_fprog whose `filter` points to
    // `len` instructions; both live across the call (the kernel copies them).
    let rc = unsafe {
        libc::setsockopt(
            f.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    force_socket_buffers(f.as_raw_fd(), rcvbuf);
    Ok(f)
}

/// One packet read from a [`packet_socket`].
pub struct PacketMeta {
    /// Bytes read (at most the buffer and the snap length).
    pub len: usize,
    /// Interface index.
    pub ifindex: i32,
    /// `PACKET_OUTGOING` (sent by this host) or not.
    pub outgoing: bool,
    /// The link-layer protocol (ethertype, host order).
    pub protocol: u16,
}

/// Read one packet (non-blocking: `WouldBlock` when none is queued).
pub fn recv_packet(f: &File, buf: &mut [u8]) -> io::Result<PacketMeta> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut alen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: buf is exclusively borrowed for its length; sll and alen are
    // locals that outlive the call and alen holds sll's size.
    let n = unsafe {
        libc::recvfrom(
            f.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
            &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
            &mut alen,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PacketMeta {
        len: usize::try_from(n).unwrap_or(0).min(buf.len()),
        ifindex: sll.sll_ifindex,
        outgoing: sll.sll_pkttype == libc::PACKET_OUTGOING,
        protocol: u16::from_be(sll.sll_protocol),
    })
}

/// Packets the kernel dropped on a [`packet_socket`] because its buffer
/// was full, since the last call (`PACKET_STATISTICS` resets them).
pub fn packet_drops(f: &File) -> io::Result<u64> {
    // SAFETY: tpacket_stats is plain data; all-zero is a valid value.
    let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `st`, a local.
    let rc = unsafe {
        libc::getsockopt(
            f.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from(st.tp_drops))
}

/// The name of interface `index` in the calling thread's namespace.
pub fn if_name(index: i32) -> Option<String> {
    let idx = u32::try_from(index).ok()?;
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes (NUL
    // included) into buf, which is that long.
    let p = unsafe { libc::if_indextoname(idx, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(s.to_string_lossy().into_owned())
}
