//! Bytes as the vector files write them: hex (keys and bodies are any
//! bytes), with the text beside it when it is UTF-8, for people. Apart from
//! the files' types so that every file's module can use it.

use serde::{Deserialize, Serialize};

/// A body: its bytes in hex, and as text when they are UTF-8.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    pub hex: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl Body {
    pub fn of(bytes: &[u8]) -> Body {
        Body {
            hex: hex(bytes),
            text: std::str::from_utf8(bytes).ok().map(str::to_string),
        }
    }

    /// The bytes; a vector file with bad hex is a bug of its generator.
    pub fn bytes(&self) -> Vec<u8> {
        unhex(&self.hex).unwrap_or_else(|| panic!("bad hex in a vector: {}", self.hex))
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of hex text, `None` if it is not hex.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
