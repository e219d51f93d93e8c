//! Index keys: the type of each key field, a key's values, and the
//! canonical bytes a composite key is stored and looked up by. Equal keys
//! must encode to equal bytes and unequal keys to unequal bytes, so the
//! type of each field is part of its encoding (`"1"` is not `1`).

/// The type of one key field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyType {
    String,
    Integer,
    Boolean,
}

impl KeyType {
    pub(super) fn tag(self) -> u8 {
        match self {
            KeyType::String => 1,
            KeyType::Integer => 2,
            KeyType::Boolean => 3,
        }
    }

    pub(super) fn from_tag(tag: u8) -> Option<KeyType> {
        match tag {
            1 => Some(KeyType::String),
            2 => Some(KeyType::Integer),
            3 => Some(KeyType::Boolean),
            _ => None,
        }
    }
}

/// One field's value in a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyValue {
    String(String),
    Integer(i64),
    Boolean(bool),
}

impl KeyValue {
    pub fn key_type(&self) -> KeyType {
        match self {
            KeyValue::String(_) => KeyType::String,
            KeyValue::Integer(_) => KeyType::Integer,
            KeyValue::Boolean(_) => KeyType::Boolean,
        }
    }
}

/// The canonical bytes of a composite key (fields in spec order).
pub fn encode_key(values: &[KeyValue]) -> Vec<u8> {
    let mut out = Vec::new();
    for value in values {
        match value {
            KeyValue::String(s) => push_string(&mut out, s),
            KeyValue::Integer(n) => push_integer(&mut out, *n),
            KeyValue::Boolean(b) => push_boolean(&mut out, *b),
        }
    }
    out
}

/// Appends one string field of a key's canonical bytes.
pub fn push_string(out: &mut Vec<u8>, s: &str) {
    out.push(KeyType::String.tag());
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends one integer field of a key's canonical bytes.
pub fn push_integer(out: &mut Vec<u8>, n: i64) {
    out.push(KeyType::Integer.tag());
    out.extend_from_slice(&n.to_le_bytes());
}

/// Appends one boolean field of a key's canonical bytes.
pub fn push_boolean(out: &mut Vec<u8>, b: bool) {
    out.push(KeyType::Boolean.tag());
    out.push(u8::from(b));
}

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_encoding_is_typed_and_ordered() {
        let a = encode_key(&[KeyValue::Integer(1), KeyValue::String("x".into())]);
        let b = encode_key(&[KeyValue::String("x".into()), KeyValue::Integer(1)]);
        assert_ne!(a, b, "order matters");
        assert_ne!(
            encode_key(&[KeyValue::Integer(1)]),
            encode_key(&[KeyValue::Boolean(true)])
        );
        assert_ne!(
            encode_key(&[KeyValue::String("1".into())]),
            encode_key(&[KeyValue::Integer(1)])
        );
        // FNV-1a 64 reference values.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
