//! A packet frame's header, decoded before its payload has arrived: what a receiver needs to
//! decide whether the frame can be legal on its QP before it buffers the payload (as a NIC
//! checks a packet's headers before it places its data).
//!
//! Invariant: [`decode_head`] reads only the fixed part of the frame, and accepts a header
//! only if [`decode_frame`](super::decode_frame) would accept it with a payload of the
//! declared length: the same version, opcode, flag and field checks, and a payload length
//! field equal to what the length prefix leaves for the payload. A fixed-size frame whose
//! prefix declares any other size fails at once.

use super::{
    FrameView, PayloadLen, field, frame_type, invalidate_of, nak_from_u8, opcode, usize_from,
};
use super::{WireError, flags};
use crate::soft::wire::{Packet, Request, RequestOp, Response, ResponseKind, WIRE_VERSION};
use crate::verbs::{Psn, QpNumber};

/// The header of the packet frame that starts `buf`, its payload replaced by the payload's
/// declared length, once the fixed part has arrived (`Ok(None)` before). `declared` is the
/// frame length [`frame_len`](super::frame_len) reported. Never panics.
pub fn decode_head(buf: &[u8], declared: usize) -> Result<Option<Packet<PayloadLen>>, WireError> {
    let Some(common) = buf.get(..field::HEADER_END) else {
        return Ok(None);
    };
    let common = FrameView { buf: common };
    let version = common.u8(field::VERSION)?;
    if version != WIRE_VERSION {
        return Err(WireError::UnsupportedVersion { got: version });
    }
    let ty = common.u8(field::FRAME_TYPE)?;
    if ty != frame_type::PACKET {
        return Err(WireError::BadField {
            field: "frame_type",
            problem: "only packets follow the connection set-up",
        });
    }
    let op = common.u8(field::OPCODE)?;
    let (fixed_end, allowed, payload) = match op {
        opcode::WRITE => (field::write::DATA_START, flags::ACK_REQ, true),
        opcode::SEND => (
            field::send::DATA_START,
            flags::ACK_REQ | flags::SEND_INVALIDATE,
            true,
        ),
        opcode::READ_DATA => (field::read_data::DATA_START, 0, true),
        opcode::READ => (field::read::END, flags::ACK_REQ, false),
        opcode::COMPARE_SWAP => (field::compare_swap::END, flags::ACK_REQ, false),
        opcode::FETCH_ADD => (field::fetch_add::END, flags::ACK_REQ, false),
        opcode::ACK => (field::ack::END, 0, false),
        opcode::ATOMIC_ACK => (field::atomic_ack::END, 0, false),
        opcode::NAK => (field::nak_body::END, 0, false),
        other => {
            return Err(WireError::UnknownOpcode {
                frame_type: frame_type::PACKET,
                opcode: other,
            });
        }
    };
    if !payload && declared != fixed_end {
        return Err(match declared.checked_sub(fixed_end) {
            Some(extra) => WireError::TrailingBytes { extra },
            None => WireError::Truncated,
        });
    }
    if declared < fixed_end {
        return Err(WireError::Truncated);
    }
    let Some(fixed) = buf.get(..fixed_end) else {
        return Ok(None);
    };
    let v = FrameView { buf: fixed };
    let fl = v.flags(allowed)?;
    let dst_qp = QpNumber(v.u24(field::DST_QP, "dst_qp")?);
    let psn = Psn::new(v.u24(field::PSN, "psn")?);
    let ack_req = fl & flags::ACK_REQ != 0;
    let room = declared - fixed_end;
    let data_len = |f: field::Field| -> Result<PayloadLen, WireError> {
        let len = usize_from(v.u32(f)?);
        if len != room {
            return Err(WireError::PayloadLength {
                field: "data_len",
                declared: len,
                available: room,
            });
        }
        Ok(PayloadLen(len))
    };
    let request = |op| {
        Ok(Some(Packet::Request(Request {
            dst_qp,
            psn,
            op,
            ack_req,
        })))
    };
    let response = |kind| Ok(Some(Packet::Response(Response { dst_qp, psn, kind })));
    match op {
        opcode::WRITE => {
            use field::write as f;
            let (addr, rkey) = (v.u64(f::ADDR)?, v.rkey(f::RKEY)?);
            let data = data_len(f::DATA_LEN)?;
            request(RequestOp::Write { addr, rkey, data })
        }
        opcode::SEND => {
            use field::send as f;
            let invalidate = invalidate_of(v.rkey(f::INVALIDATE_RKEY)?, fl)?;
            let data = data_len(f::DATA_LEN)?;
            request(RequestOp::Send { data, invalidate })
        }
        opcode::READ_DATA => response(ResponseKind::ReadData(data_len(
            field::read_data::DATA_LEN,
        )?)),
        opcode::READ => {
            use field::read as f;
            request(RequestOp::Read {
                addr: v.u64(f::ADDR)?,
                rkey: v.rkey(f::RKEY)?,
                len: v.u32(f::LEN)?,
            })
        }
        opcode::COMPARE_SWAP => {
            use field::compare_swap as f;
            request(RequestOp::CompareSwap {
                addr: v.u64(f::ADDR)?,
                rkey: v.rkey(f::RKEY)?,
                compare: v.u64(f::COMPARE)?,
                swap: v.u64(f::SWAP)?,
            })
        }
        opcode::FETCH_ADD => {
            use field::fetch_add as f;
            request(RequestOp::FetchAdd {
                addr: v.u64(f::ADDR)?,
                rkey: v.rkey(f::RKEY)?,
                add: v.u64(f::ADD)?,
            })
        }
        opcode::ACK => response(ResponseKind::Ack),
        opcode::ATOMIC_ACK => {
            response(ResponseKind::AtomicAck(v.u64(field::atomic_ack::ORIGINAL)?))
        }
        _ => response(ResponseKind::Nak(nak_from_u8(
            v.u8(field::nak_body::CODE)?,
        )?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soft::wire::{Frame, encode_frame};
    use crate::verbs::MemoryKey;

    fn encoded(p: Packet<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        encode_frame(&Frame::Packet(p), &mut out);
        out
    }

    #[test]
    fn a_write_header_decodes_before_its_payload() {
        let data = vec![7u8; 1000];
        let bytes = encoded(Packet::Request(Request {
            dst_qp: QpNumber(3),
            psn: Psn::new(9),
            op: RequestOp::Write {
                addr: 0x1000,
                rkey: MemoryKey(5),
                data: &data,
            },
            ack_req: true,
        }));
        let declared = bytes.len();
        assert_eq!(decode_head(&bytes[..20], declared), Ok(None));
        let head = decode_head(&bytes[..field::write::DATA_START], declared)
            .unwrap()
            .unwrap();
        assert_eq!(
            head,
            Packet::Request(Request {
                dst_qp: QpNumber(3),
                psn: Psn::new(9),
                op: RequestOp::Write {
                    addr: 0x1000,
                    rkey: MemoryKey(5),
                    data: PayloadLen(1000),
                },
                ack_req: true,
            })
        );
        // A prefix that disagrees with the payload length field.
        assert!(matches!(
            decode_head(&bytes, declared + 10),
            Err(WireError::PayloadLength { .. })
        ));
    }

    #[test]
    fn a_fixed_size_frame_declaring_more_fails_at_once() {
        let bytes = encoded(Packet::Request(Request {
            dst_qp: QpNumber(3),
            psn: Psn::new(9),
            op: RequestOp::Read {
                addr: 0,
                rkey: MemoryKey(5),
                len: 8,
            },
            ack_req: false,
        }));
        assert!(decode_head(&bytes, bytes.len()).unwrap().is_some());
        assert_eq!(
            decode_head(&bytes[..8], 1 << 29),
            Err(WireError::TrailingBytes {
                extra: (1 << 29) - field::read::END
            })
        );
    }

    #[test]
    fn every_packet_header_agrees_with_the_full_decoder() {
        let data = [1u8, 2, 3];
        let packets: Vec<Packet<&[u8]>> = vec![
            Packet::Request(Request {
                dst_qp: QpNumber(1),
                psn: Psn::new(2),
                op: RequestOp::Send {
                    data: &data,
                    invalidate: Some(MemoryKey(4)),
                },
                ack_req: false,
            }),
            Packet::Response(Response {
                dst_qp: QpNumber(1),
                psn: Psn::new(2),
                kind: ResponseKind::ReadData(&data),
            }),
            Packet::Response(Response {
                dst_qp: QpNumber(1),
                psn: Psn::new(2),
                kind: ResponseKind::AtomicAck(77),
            }),
            Packet::Response(Response {
                dst_qp: QpNumber(1),
                psn: Psn::new(2),
                kind: ResponseKind::Nak(crate::soft::wire::NakCode::RemoteAccessError),
            }),
        ];
        for p in packets {
            let bytes = encoded(p.clone());
            let head = decode_head(&bytes, bytes.len()).unwrap().unwrap();
            assert_eq!(head, p.map_data(|d| PayloadLen(d.len())));
        }
    }
}
