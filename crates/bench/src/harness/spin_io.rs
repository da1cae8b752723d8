//! Busy-polling socket I/O for the round-trip anchors (Figure 1's ping-pong, the floor's raw
//! echo): non-blocking reads and writes retried until done, yielding the core every few empty
//! tries.

use anyhow::{Result, bail};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

/// Fills `buf` from a non-blocking stream by spinning; `false` if the peer closed first.
pub fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool> {
    let (mut got, mut spins) = (0, 0u32);
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                spins = spins.wrapping_add(1);
                relax(spins);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// Writes all of `buf` to a non-blocking stream by spinning.
pub fn spin_write(s: &mut TcpStream, buf: &[u8]) -> Result<()> {
    let (mut put, mut spins) = (0, 0u32);
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(0) => bail!("connection closed while writing"),
            Ok(n) => put += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                spins = spins.wrapping_add(1);
                relax(spins);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Spin, but let another runnable thread have the core every few empty tries: each is a
/// syscall (~1 µs), and on a loaded 2-core machine both ends may share one core, where a
/// longer spin costs the peer that much time per round trip.
fn relax(spins: u32) {
    if spins % 8 == 0 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}
