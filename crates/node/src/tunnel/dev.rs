//! The TUN device: opened on `/dev/net/tun` (`TUNSETIFF`, `IFF_TUN |
//! IFF_NO_PI`: one IP packet per read/write, no extra header), created in
//! the host's namespace and then moved into the tunnel's namespace, where
//! it gets its address, `up` and the default route. The file descriptor
//! stays attached to the device across the move, so no thread of ours
//! has to enter the namespace.
//!
//! The `unsafe` of the tunnel drivers is here: the two ioctls and tokio's
//! registration of the fd; a crate
//! (tun-rs) would bring a larger surface for the one call we need.

use super::netns::Namespace;
use super::{SysError, check_name, ip};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use tokio::io::unix::AsyncFd;

/// Largest packet we read or write (the device's MTU is set below it).
pub const MAX_PACKET: usize = 65_535;
/// The device's MTU: the largest IP packet. The link exists only between
/// the applications and the tunnel (nothing is forwarded as packets), so
/// it is as large as IP allows: the applications' TCP sends 64 KiB
/// segments, and each TUN read or write, smoltcp pass and checksum
/// covers 40 times more data than at 1500 bytes.
pub const MTU: u16 = 65_535;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as TUNSETIFF reads it: the name, the flags, padding.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TUN device, non-blocking, registered with tokio.
#[derive(Debug)]
pub struct TunDevice {
    fd: AsyncFd<File>,
    name: String,
}

impl TunDevice {
    /// Create TUN device `name` in the current (host) namespace.
    #[allow(unsafe_code)]
    pub fn create(name: &str) -> Result<Self, SysError> {
        check_name(name)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        let mut req = IfReq {
            name: [0; 16],
            flags: IFF_TUN | IFF_NO_PI,
            _pad: [0; 22],
        };
        // check_name bounds the name to 15 bytes; the 16th stays NUL.
        for (d, s) in req.name.iter_mut().zip(name.bytes()) {
            *d = s;
        }
        // SAFETY: the fd is open and owned by `file`; `req` is a properly
        // laid out, NUL-terminated ifreq that lives across the call, and
        // TUNSETIFF reads and writes only within it.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        set_nonblocking(&file)?;
        // SAFETY: `file` is an open std File moved into the AsyncFd, which
        // owns it until dropped; a File's raw fd never changes.
        let fd = unsafe { AsyncFd::register(file) }.map_err(|e| SysError::Io(e.into()))?;
        Ok(TunDevice {
            fd,
            name: name.to_string(),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Move the device into `ns`, give it `addr/prefix` (and `v6`/128,
    /// without duplicate address detection: nobody else is on the link),
    /// the MTU, bring it up and make it the namespace's default route
    /// (IPv4, and IPv6 with `v6`).
    pub fn move_into(
        &self,
        ns: &Namespace,
        addr: Ipv4Addr,
        prefix: u8,
        v6: Option<Ipv6Addr>,
    ) -> Result<(), SysError> {
        ip(&["link", "set", "dev", &self.name, "netns", ns.name()])?;
        let cidr = format!("{addr}/{prefix}");
        let mtu = MTU.to_string();
        ns.exec_ip(&["addr", "add", &cidr, "dev", &self.name])?;
        if let Some(a) = v6 {
            let c6 = format!("{a}/128");
            ns.exec_ip(&["-6", "addr", "add", &c6, "dev", &self.name, "nodad"])?;
        }
        ns.exec_ip(&["link", "set", "dev", &self.name, "mtu", &mtu, "up"])?;
        ns.exec_ip(&["route", "add", "default", "dev", &self.name])?;
        if v6.is_some() {
            ns.exec_ip(&["-6", "route", "add", "default", "dev", &self.name])?;
        }
        Ok(())
    }

    /// Read one packet into `buf` (at least [`MAX_PACKET`] long to never
    /// truncate); returns its length.
    pub async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|f| f.get_ref().read(buf)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// Write one packet.
    pub async fn send(&self, pkt: &[u8]) -> std::io::Result<usize> {
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|f| f.get_ref().write(pkt)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }
}

fn set_nonblocking(f: &File) -> std::io::Result<()> {
    // std has no non-blocking setter for a File: FIONBIO on the fd.
    #[allow(unsafe_code)]
    // SAFETY: FIONBIO reads one c_int from a pointer to a live local.
    let rc = unsafe {
        let mut on: libc::c_int = 1;
        libc::ioctl(f.as_raw_fd(), libc::FIONBIO, &mut on)
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
