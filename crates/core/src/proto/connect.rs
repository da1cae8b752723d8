//! Private data of connection requests: which role a QP plays for which client.
//!
//! The memory node's accept policy reads it to pick the queue pair's PD, queues and rights;
//! nothing about PDs travels on the wire. Data and loopback connections prove who they are
//! with a secret (a client's comes in the `Welcome` reply to its control connection's `Hello`).
//!
//! ```text
//! 0..2 "PT" | 2 u8 role | 3 u8 slot | 4 u32 client id | 8 u64 secret
//! ```

/// What a connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A client's control QP (RPCs into the node's shared receive queue).
    Control,
    /// A client's data QP (one-sided access through windows).
    Data,
    /// The manager's own loopback QP (lifetime CAS through the NIC).
    Loopback,
    /// A client's allocation QP: one-sided allocation by SEND (`manager::onesided`).
    Alloc,
}

/// Parsed private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intent {
    /// Role.
    pub role: Role,
    /// Client id (data), 0 otherwise.
    pub client_id: u32,
    /// Secret (data, loopback), 0 otherwise.
    pub secret: u64,
    /// Index of a client's data connection (its virtual QP's slot), 0 otherwise.
    pub slot: u8,
}

/// Encoded length.
pub const INTENT_LEN: usize = 16;

impl Intent {
    /// Encodes.
    pub fn encode(&self) -> [u8; INTENT_LEN] {
        let mut b = [0u8; INTENT_LEN];
        b[0..2].copy_from_slice(b"PT");
        b[2] = match self.role {
            Role::Control => 0,
            Role::Data => 1,
            Role::Loopback => 2,
            Role::Alloc => 3,
        };
        b[3] = self.slot;
        b[4..8].copy_from_slice(&self.client_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.secret.to_le_bytes());
        b
    }

    /// Parses; `None` for anything malformed.
    pub fn decode(b: &[u8]) -> Option<Intent> {
        if b.len() != INTENT_LEN || &b[0..2] != b"PT" {
            return None;
        }
        let role = match b[2] {
            0 => Role::Control,
            1 => Role::Data,
            2 => Role::Loopback,
            3 => Role::Alloc,
            _ => return None,
        };
        let mut id = [0u8; 4];
        id.copy_from_slice(&b[4..8]);
        let mut secret = [0u8; 8];
        secret.copy_from_slice(&b[8..16]);
        Some(Intent {
            role,
            client_id: u32::from_le_bytes(id),
            secret: u64::from_le_bytes(secret),
            slot: b[3],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let i = Intent {
            role: Role::Data,
            client_id: 7,
            secret: 0xdead_beef,
            slot: 2,
        };
        assert_eq!(Intent::decode(&i.encode()), Some(i));
        assert_eq!(Intent::decode(b"garbage"), None);
        let mut bad = i.encode();
        bad[2] = 9;
        assert_eq!(Intent::decode(&bad), None);
    }
}
