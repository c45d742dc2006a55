//! Snapshot authenticity (operations.md §5): every snapshot a runtime
//! stores carries an HMAC-SHA256 tag under the runtime's state key, bound to
//! the run's id, owner and generation. A snapshot whose tag does not verify
//! — written under another key, altered, or moved to another run's row —
//! fails that run alone with `internal_error` and is never decoded.
//!
//! The key comes from `--state-key-file` / [`crate::RuntimeBuilder::state_key`]
//! (required with PostgreSQL, whose snapshots leave the machine); a SQLite
//! state directory without one gets a generated key, stored 0600 as
//! [`STATE_KEY_FILE`] beside the database. The in-memory store needs none.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use std::path::Path;

/// Fewest bytes a state key may have.
pub const MIN_STATE_KEY_BYTES: usize = 32;
/// Most bytes a state key file may have.
pub const MAX_STATE_KEY_BYTES: usize = 4096;
/// The generated key's file in a SQLite state directory.
pub const STATE_KEY_FILE: &str = "state.key";

/// Bytes of the tag appended to a stored snapshot.
const TAG_BYTES: usize = 32;

/// What the tag's input starts with: a domain and format version.
const DOMAIN: &[u8] = b"quickcell snapshot v1\0";

/// A runtime's key for snapshot tags.
#[derive(Clone)]
pub struct StateKey(std::sync::Arc<[u8]>);

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
        Ok(Self(bytes.into()))
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

    /// The MAC over the snapshot and what it is bound to.
    fn mac(
        &self,
        run_id: &str,
        owner: &crate::store::Owner,
        generation: u64,
        snapshot: &[u8],
    ) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256>>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(DOMAIN);
        for field in [run_id, &owner.agent_run, &owner.session] {
            mac.update(&(field.len() as u64).to_le_bytes());
            mac.update(field.as_bytes());
        }
        mac.update(&generation.to_le_bytes());
        mac.update(snapshot);
        mac
    }

    /// Appends the tag of `snapshot` for this run, owner and generation.
    pub(crate) fn seal(
        &self,
        run_id: &str,
        owner: &crate::store::Owner,
        generation: u64,
        mut snapshot: Vec<u8>,
    ) -> Vec<u8> {
        let tag = self
            .mac(run_id, owner, generation, &snapshot)
            .finalize()
            .into_bytes();
        snapshot.extend_from_slice(&tag);
        snapshot
    }

    /// The snapshot inside `sealed` when its tag verifies for this run,
    /// owner and generation (compared in constant time).
    pub(crate) fn open<'a>(
        &self,
        run_id: &str,
        owner: &crate::store::Owner,
        generation: u64,
        sealed: &'a [u8],
    ) -> Result<&'a [u8], String> {
        let Some(split) = sealed.len().checked_sub(TAG_BYTES) else {
            return Err("it carries no authentication tag".into());
        };
        let (snapshot, tag) = sealed.split_at(split);
        self.mac(run_id, owner, generation, snapshot)
            .verify_slice(tag)
            .map_err(|_| {
                "its authentication tag does not verify (another state key, or it was altered or moved to another run)".to_string()
            })?;
        Ok(snapshot)
    }
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
    fn a_sealed_snapshot_opens_for_its_run_only() {
        let key = StateKey::new(&[7; 32]).unwrap();
        let sealed = key.seal("r1", &owner("s"), 3, vec![1, 2, 3]);
        assert_eq!(key.open("r1", &owner("s"), 3, &sealed).unwrap(), &[1, 2, 3]);
        assert!(key.open("r2", &owner("s"), 3, &sealed).is_err());
        assert!(key.open("r1", &owner("t"), 3, &sealed).is_err());
        assert!(key.open("r1", &owner("s"), 4, &sealed).is_err());
        let other = StateKey::new(&[8; 32]).unwrap();
        assert!(other.open("r1", &owner("s"), 3, &sealed).is_err());
        let mut altered = sealed.clone();
        altered[1] ^= 1;
        assert!(key.open("r1", &owner("s"), 3, &altered).is_err());
        assert!(key.open("r1", &owner("s"), 3, &sealed[..10]).is_err());
        assert!(key.open("r1", &owner("s"), 3, &[]).is_err());
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
