//! Snapshot confidentiality and authenticity (operations.md §5): every
//! snapshot a runtime stores is encrypted and authenticated with
//! XChaCha20-Poly1305 under a key derived from the runtime's state key,
//! with the run's id, owner and generation as associated data. A snapshot
//! that does not open — written under another key, altered, or moved to
//! another run's row — fails that run alone with `internal_error` and is
//! never decoded; a database reader learns nothing of the parked heap.
//!
//! The settlements a host records for a parked run (its tool calls'
//! results) are sealed the same way, bound to the run and the request, and
//! stored as base64 text; one that does not open is not delivered.
//!
//! The key comes from `--state-key-file` / [`crate::RuntimeBuilder::state_key`]
//! (required with PostgreSQL, whose snapshots leave the machine); a SQLite
//! state directory without one gets a generated key, stored 0600 as
//! [`STATE_KEY_FILE`] beside the database. The in-memory store needs none.

use chacha20poly1305::aead::{AeadInPlace as _, KeyInit as _};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use std::path::Path;

/// Fewest bytes a state key may have.
pub const MIN_STATE_KEY_BYTES: usize = 32;
/// Most bytes a state key file may have.
pub const MAX_STATE_KEY_BYTES: usize = 4096;
/// The generated key's file in a SQLite state directory.
pub const STATE_KEY_FILE: &str = "state.key";

/// Bytes of the random nonce in front of a stored snapshot.
const NONCE_BYTES: usize = 24;
/// Bytes of the authentication tag behind it.
const TAG_BYTES: usize = 16;

/// What a snapshot's associated data starts with: a domain and format
/// version.
const DOMAIN: &[u8] = b"quickcell snapshot v1\0";

/// What a recorded settlement's associated data starts with.
const SETTLEMENT_DOMAIN: &[u8] = b"quickcell settlement v1\0";

/// A runtime's key for snapshots: the encryption key derived from the
/// state key's bytes (HMAC-SHA256 of a fixed label).
#[derive(Clone)]
pub struct StateKey(std::sync::Arc<[u8; 32]>);

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKey(..)")
    }
}

impl StateKey {
    /// A key of `bytes` ([`MIN_STATE_KEY_BYTES`] to [`MAX_STATE_KEY_BYTES`]).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Config`] when it is shorter or longer.
    pub fn new(bytes: &[u8]) -> Result<Self, crate::Error> {
        if bytes.len() < MIN_STATE_KEY_BYTES {
            return Err(crate::Error::Config(format!(
                "the state key has {} bytes; it needs at least {MIN_STATE_KEY_BYTES} (e.g. `head -c 32 /dev/urandom | base64 > state.key`)",
                bytes.len()
            )));
        }
        if bytes.len() > MAX_STATE_KEY_BYTES {
            return Err(crate::Error::Config(format!(
                "the state key is over {MAX_STATE_KEY_BYTES} bytes"
            )));
        }
        let mut derive =
            <Hmac<Sha256> as hmac::Mac>::new_from_slice(bytes).expect("HMAC takes any key length");
        derive.update(b"quickcell snapshot encryption key v1");
        Ok(Self(std::sync::Arc::new(
            derive.finalize().into_bytes().into(),
        )))
    }

    /// A key for `purpose`, derived from this one (HMAC-SHA256 of the
    /// purpose's label): hosts sharing the state key share it.
    #[cfg_attr(not(feature = "mcp-server"), allow(dead_code))]
    pub(crate) fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        let mut derive = <Hmac<Sha256> as hmac::Mac>::new_from_slice(&self.0[..])
            .expect("HMAC takes any key length");
        derive.update(purpose);
        derive.finalize().into_bytes().into()
    }

    /// The key in the file at `path`: its bytes, without trailing
    /// whitespace (a newline an editor added).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Config`] when the file cannot be read, is over
    /// [`MAX_STATE_KEY_BYTES`], or holds fewer than [`MIN_STATE_KEY_BYTES`].
    pub fn from_file(path: &Path) -> Result<Self, crate::Error> {
        use std::io::Read as _;
        let unreadable = |e: std::io::Error| {
            crate::Error::Config(format!(
                "cannot read the state key file {}: {e}",
                path.display()
            ))
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .map_err(unreadable)?
            .take(MAX_STATE_KEY_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        bytes.truncate(end.min(MAX_STATE_KEY_BYTES + 1));
        Self::new(&bytes).map_err(|e| match e {
            crate::Error::Config(m) => crate::Error::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// The key of the SQLite state directory `dir`: [`STATE_KEY_FILE`],
    /// generated (32 random bytes, hex, mode 0600) when missing.
    pub(crate) fn of_state_dir(dir: &Path) -> Result<Self, crate::Error> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = dir.join(STATE_KEY_FILE);
        let mut random = [0u8; 32];
        getrandom::fill(&mut random)
            .map_err(|e| crate::Error::Config(format!("cannot generate a state key: {e}")))?;
        let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
        // Created exclusively: of two processes starting at once, one
        // writes it and both then read the same key.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut file) => {
                file.write_all(hex.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| {
                        crate::Error::Config(format!("cannot write {}: {e}", path.display()))
                    })?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(crate::Error::Config(format!(
                    "cannot create {}: {e}",
                    path.display()
                )))
            }
        }
        // A concurrent creator may not have written it yet.
        for _ in 0..50 {
            match Self::from_file(&path) {
                Ok(key) => return Ok(key),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
        Self::from_file(&path)
    }

    /// The associated data: what a snapshot is bound to.
    fn associated_data(run_id: &str, owner: &crate::store::Owner, generation: u64) -> Vec<u8> {
        let mut aad = DOMAIN.to_vec();
        for field in [run_id, &owner.agent_run, &owner.session] {
            aad.extend_from_slice(&(field.len() as u64).to_le_bytes());
            aad.extend_from_slice(field.as_bytes());
        }
        aad.extend_from_slice(&generation.to_le_bytes());
        aad
    }

    /// `snapshot` encrypted for this run, owner and generation: a random
    /// nonce, the ciphertext, the tag. Fails when the system has no random
    /// bytes to give (a fixed nonce would reuse the key stream).
    pub(crate) fn seal(
        &self,
        run_id: &str,
        owner: &crate::store::Owner,
        generation: u64,
        snapshot: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        self.seal_bytes(&Self::associated_data(run_id, owner, generation), snapshot)
            .map_err(|e| format!("no random nonce to encrypt the snapshot: {e}"))
    }

    /// The snapshot inside `sealed` when it opens (decrypts and
    /// authenticates) for this run, owner and generation.
    pub(crate) fn open(
        &self,
        run_id: &str,
        owner: &crate::store::Owner,
        generation: u64,
        sealed: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        self.open_bytes(&Self::associated_data(run_id, owner, generation), sealed)
            .map_err(|e| match e {
                Unsealed::Short => "it carries no authentication tag".to_string(),
                Unsealed::Tag => "its authentication tag does not verify (another state key, or it was altered or moved to another run)".to_string(),
            })
    }

    /// What a recorded settlement is bound to: its run and request.
    fn settlement_data(run_id: &str, request_id: u64) -> Vec<u8> {
        let mut aad = SETTLEMENT_DOMAIN.to_vec();
        aad.extend_from_slice(&(run_id.len() as u64).to_le_bytes());
        aad.extend_from_slice(run_id.as_bytes());
        aad.extend_from_slice(&request_id.to_le_bytes());
        aad
    }

    /// A settlement's JSON sealed for request `request_id` of `run_id`, as
    /// the base64 text the store keeps.
    pub(crate) fn seal_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        json: &str,
    ) -> Result<String, String> {
        use base64::Engine as _;
        let sealed = self
            .seal_bytes(
                &Self::settlement_data(run_id, request_id),
                json.as_bytes().to_vec(),
            )
            .map_err(|e| format!("no random nonce to encrypt a settlement: {e}"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(sealed))
    }

    /// The settlement JSON inside `stored` when it opens for request
    /// `request_id` of `run_id`.
    pub(crate) fn open_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        stored: &str,
    ) -> Result<String, String> {
        use base64::Engine as _;
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(stored)
            .map_err(|e| format!("a recorded settlement is not sealed (not base64: {e})"))?;
        let json = self
            .open_bytes(&Self::settlement_data(run_id, request_id), sealed)
            .map_err(|_| "a recorded settlement does not open (another state key, or it was altered or moved)".to_string())?;
        String::from_utf8(json).map_err(|_| "a recorded settlement is not text".to_string())
    }

    /// `plain` encrypted and bound to `aad`: nonce, ciphertext, tag.
    fn seal_bytes(&self, aad: &[u8], plain: Vec<u8>) -> Result<Vec<u8>, getrandom::Error> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce)?;
        let mut sealed = Vec::with_capacity(NONCE_BYTES + plain.len() + TAG_BYTES);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&plain);
        drop(plain);
        let tag = XChaCha20Poly1305::new((&*self.0).into())
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), aad, &mut sealed[NONCE_BYTES..])
            .expect("what is sealed is far below the cipher's length limit");
        sealed.extend_from_slice(&tag);
        Ok(sealed)
    }

    /// What `sealed` holds when it opens for `aad`.
    fn open_bytes(&self, aad: &[u8], mut sealed: Vec<u8>) -> Result<Vec<u8>, Unsealed> {
        if sealed.len() < NONCE_BYTES + TAG_BYTES {
            return Err(Unsealed::Short);
        }
        let tag_at = sealed.len() - TAG_BYTES;
        let tag = chacha20poly1305::Tag::clone_from_slice(&sealed[tag_at..]);
        let nonce = XNonce::clone_from_slice(&sealed[..NONCE_BYTES]);
        XChaCha20Poly1305::new((&*self.0).into())
            .decrypt_in_place_detached(&nonce, aad, &mut sealed[NONCE_BYTES..tag_at], &tag)
            .map_err(|_| Unsealed::Tag)?;
        sealed.truncate(tag_at);
        sealed.drain(..NONCE_BYTES);
        Ok(sealed)
    }
}

/// Why sealed bytes do not open.
enum Unsealed {
    /// Too short to hold a nonce and a tag.
    Short,
    /// The tag does not verify.
    Tag,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Owner;

    fn owner(s: &str) -> Owner {
        Owner {
            agent_run: "a".into(),
            session: s.into(),
        }
    }

    #[test]
    fn a_sealed_settlement_opens_for_its_run_and_request_only() {
        let key = StateKey::new(&[7; 32]).unwrap();
        let json = r#"{"id":4,"ok":true,"value":"a tenant's secret"}"#;
        let stored = key.seal_settlement("r1", 4, json).unwrap();
        assert!(!stored.contains("secret"));
        assert_eq!(key.open_settlement("r1", 4, &stored).unwrap(), json);
        assert!(key.open_settlement("r1", 5, &stored).is_err());
        assert!(key.open_settlement("r2", 4, &stored).is_err());
        let other = StateKey::new(&[8; 32]).unwrap();
        assert!(other.open_settlement("r1", 4, &stored).is_err());
        assert!(key.open_settlement("r1", 4, json).is_err(), "plain text");
        assert!(key.open_settlement("r1", 4, "AAAA").is_err(), "too short");
    }

    #[test]
    fn a_sealed_snapshot_opens_for_its_run_only() {
        let key = StateKey::new(&[7; 32]).unwrap();
        let plain = b"a parked heap with a tenant's secret".to_vec();
        let sealed = key.seal("r1", &owner("s"), 3, plain.clone()).unwrap();
        assert!(
            !sealed.windows(6).any(|w| w == b"secret"),
            "the stored bytes do not show the heap"
        );
        let open = |k: &StateKey, run: &str, o: &Owner, g: u64, bytes: &[u8]| {
            k.open(run, o, g, bytes.to_vec())
        };
        assert_eq!(open(&key, "r1", &owner("s"), 3, &sealed).unwrap(), plain);
        assert!(open(&key, "r2", &owner("s"), 3, &sealed).is_err());
        assert!(open(&key, "r1", &owner("t"), 3, &sealed).is_err());
        assert!(open(&key, "r1", &owner("s"), 4, &sealed).is_err());
        let other = StateKey::new(&[8; 32]).unwrap();
        assert!(open(&other, "r1", &owner("s"), 3, &sealed).is_err());
        for at in [0, 30, sealed.len() - 1] {
            let mut altered = sealed.clone();
            altered[at] ^= 1;
            assert!(open(&key, "r1", &owner("s"), 3, &altered).is_err());
        }
        assert!(open(&key, "r1", &owner("s"), 3, &sealed[..10]).is_err());
        assert!(open(&key, "r1", &owner("s"), 3, &[]).is_err());
        // Two seals of one snapshot differ (random nonces).
        assert_ne!(sealed, key.seal("r1", &owner("s"), 3, plain).unwrap());
    }

    #[test]
    fn keys_have_bounded_lengths() {
        assert!(StateKey::new(&[0; MIN_STATE_KEY_BYTES - 1]).is_err());
        assert!(StateKey::new(&[0; MIN_STATE_KEY_BYTES]).is_ok());
        assert!(StateKey::new(&vec![0; MAX_STATE_KEY_BYTES]).is_ok());
        assert!(StateKey::new(&vec![0; MAX_STATE_KEY_BYTES + 1]).is_err());
    }

    #[test]
    fn a_state_directory_gets_one_private_key() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("quickcell-key-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = StateKey::of_state_dir(&dir).unwrap();
        let again = StateKey::of_state_dir(&dir).unwrap();
        assert_eq!(first.0, again.0);
        let mode = std::fs::metadata(dir.join(STATE_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(dir.join("short"), "too short\n").unwrap();
        let e = StateKey::from_file(&dir.join("short"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs at least 32"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
