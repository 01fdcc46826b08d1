//! The process environment: the one module that reads it ([`var_os`]), and the one rule its
//! variables follow ([`Vars`]). The `MINFER_*` overrides are read through here and parsed into
//! the backends' and the session's types by `crate::overrides`; locations that are not engine
//! switches (`HOME`, `XDG_CACHE_HOME`, the Hugging Face cache variables, `CXX`) are looked up
//! through [`var_os`].
//!
//! One rule for every variable: unset and empty mean the same thing, the default. Flags are
//! `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (any case); any other value is an error
//! naming the variable and the value, never a silent guess.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// Strict reads of variables through one lookup (the process environment's [`var_os`], or a
/// test's): unset and empty are `None`.
pub struct Vars<L> {
    lookup: L,
}

impl<L: Fn(&str) -> Option<OsString>> Vars<L> {
    pub fn new(lookup: L) -> Self {
        Vars { lookup }
    }

    /// The value as text; one that is not UTF-8 is an error naming the variable.
    pub fn get(&self, name: &str) -> Result<Option<String>> {
        match (self.lookup)(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|v| Error::InvalidArgument(format!("{name}={}: not valid UTF-8", v.to_string_lossy()))),
        }
    }

    /// The value as a flag ([`parse_flag`]).
    pub fn flag(&self, name: &str) -> Result<Option<bool>> {
        self.get(name)?.map(|v| parse_flag(name, &v)).transpose()
    }

    pub fn path(&self, name: &str) -> Result<Option<PathBuf>> {
        self.get(name).map(|v| v.map(PathBuf::from))
    }
}

/// The error for a value that does not parse: `NAME="value": why`.
pub fn bad(name: &str, value: &str, why: &str) -> Error {
    Error::InvalidArgument(format!("{name}={value:?}: {why}"))
}

/// The one truthiness rule: `1`/`true`/`yes`/`on` and `0`/`false`/`no`/`off`, any case.
pub fn parse_flag(name: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(bad(name, value, "expected 1, true, yes, on or 0, false, no, off")),
    }
}

/// One variable of the process environment. Every read of the environment in the crate goes
/// through here (the `MINFER_*` overrides, and locations such as `HOME` or `HF_HOME`).
pub fn var_os(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// The user's cache directory: `$XDG_CACHE_HOME`, else `$HOME/.cache` (empty counts as unset).
pub fn user_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")))
}

/// The user's data directory: `$XDG_DATA_HOME`, else `$HOME/.local/share` (empty counts as
/// unset); `chat` keeps its history there.
pub fn user_data_dir() -> Option<PathBuf> {
    let var = |k: &str| var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("XDG_DATA_HOME").or_else(|| var("HOME").map(|h| h.join(".local").join("share")))
}

/// Where `scripts/fetch-models` puts models and where the default model is looked for first:
/// `$MINFER_MODELS_DIR`, else `minfer/models` in the user's cache directory.
pub fn models_dir() -> Option<PathBuf> {
    var_os("MINFER_MODELS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| Some(user_cache_dir()?.join("minfer").join("models")))
}

/// The C++ compiler for the CUDA emulator: `$CXX`, else `g++`.
#[cfg(feature = "cuda")]
pub fn cxx() -> OsString {
    var_os("CXX").filter(|v| !v.is_empty()).unwrap_or_else(|| "g++".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_and_empty_are_none() {
        let vars = Vars::new(|k: &str| (k == "EMPTY").then(OsString::new));
        assert_eq!(vars.get("EMPTY").unwrap(), None);
        assert_eq!(vars.get("UNSET").unwrap(), None);
        assert_eq!(vars.flag("EMPTY").unwrap(), None);
    }
}
