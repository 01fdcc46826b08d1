//! `org/name[@revision]` in the Hugging Face cache (`huggingface_hub`'s layout:
//! `models--{org}--{name}/refs/{revision}` holds a commit hash, `snapshots/{commit}/` the files).
//! Which kind of model a MODEL argument names is decided once, in `load::resolve`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// `org/name[@revision]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubName {
    pub org: String,
    pub name: String,
    pub revision: Option<String>,
}

impl HubName {
    /// None unless `s` is a well-formed repo id (ASCII letters, digits, `.`, `_`, `-`; no `..`)
    /// with an optional revision (the same characters and `/`, no `..` component).
    pub fn parse(s: &str) -> Option<HubName> {
        let (repo, revision) = match s.split_once('@') {
            Some((r, rev)) => (r, Some(rev)),
            None => (s, None),
        };
        let (org, name) = repo.split_once('/')?;
        let part_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 96
                && !p.starts_with(['.', '-'])
                && !p.contains("..")
                && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !part_ok(org) || !part_ok(name) {
            return None;
        }
        if let Some(rev) = revision {
            let ok = !rev.is_empty()
                && rev.len() <= 256
                && rev.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
                && rev.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
            if !ok {
                return None;
            }
        }
        Some(HubName {
            org: org.into(),
            name: name.into(),
            revision: revision.map(str::to_string),
        })
    }

    /// `models--{org}--{name}`
    pub fn cache_dir_name(&self) -> String {
        format!("models--{}--{}", self.org, self.name)
    }
}

impl std::fmt::Display for HubName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.org, self.name)?;
        if let Some(r) = &self.revision {
            write!(f, "@{r}")?;
        }
        Ok(())
    }
}

/// The hub cache directory, as `huggingface_hub` finds it: `$HF_HUB_CACHE`, else
/// `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
/// `env` looks a variable up (empty values count as unset), so this is testable without
/// touching the process environment.
pub fn hub_cache_root(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = var("HF_HUB_CACHE") {
        return Some(p);
    }
    if let Some(p) = var("HF_HOME") {
        return Some(p.join("hub"));
    }
    if let Some(p) = var("XDG_CACHE_HOME") {
        return Some(p.join("huggingface").join("hub"));
    }
    var("HOME")
        .or_else(|| var("USERPROFILE"))
        .map(|h| h.join(".cache").join("huggingface").join("hub"))
}

/// A 40-hex commit hash, as snapshot directories are named.
fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The snapshot directory of `name` under the cache `root`, or the list of places tried.
pub fn resolve_in(root: &Path, name: &HubName) -> std::result::Result<PathBuf, Vec<String>> {
    let repo = root.join(name.cache_dir_name());
    let mut tried = Vec::new();
    if !repo.is_dir() {
        tried.push(format!("{} (no such directory)", repo.display()));
        return Err(tried);
    }
    let snapshots = repo.join("snapshots");
    let commit = match name.revision.as_deref() {
        Some(rev) if is_commit(rev) => rev.to_string(),
        rev => {
            let asked = rev.unwrap_or("main");
            let refs = repo.join("refs").join(asked);
            match std::fs::read_to_string(&refs) {
                Ok(s) if is_commit(s.trim()) => s.trim().to_string(),
                Ok(s) => {
                    tried.push(format!("{} (holds {:?}, not a commit hash)", refs.display(), s.trim()));
                    return Err(tried);
                }
                Err(_) if rev.is_none() => match only_snapshot(&snapshots) {
                    // A cache copied without its refs: one snapshot is unambiguous.
                    Some(c) => c,
                    None => {
                        tried.push(format!(
                            "{} (missing, and {} does not hold exactly one snapshot)",
                            refs.display(),
                            snapshots.display()
                        ));
                        return Err(tried);
                    }
                },
                Err(_) => {
                    tried.push(format!("{} (no such revision)", refs.display()));
                    return Err(tried);
                }
            }
        }
    };
    let snap = snapshots.join(&commit);
    if snap.is_dir() {
        Ok(snap)
    } else {
        tried.push(format!("{} (no such snapshot)", snap.display()));
        Err(tried)
    }
}

fn only_snapshot(dir: &Path) -> Option<String> {
    let mut names = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok());
    let first = names.next()?;
    names.next().is_none().then_some(first)
}

/// Resolves `name` in the cache the environment points at.
pub fn resolve_name(name: &HubName) -> Result<PathBuf> {
    let root = hub_cache_root(crate::env::var_os).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "model '{name}': no Hugging Face cache (HF_HUB_CACHE, HF_HOME and HOME are unset)"
        ))
    })?;
    resolve_in(&root, name).map_err(|tried| {
        Error::InvalidArgument(format!(
            "model '{name}' is neither a path here nor in the Hugging Face cache; tried: {} \
             (fetch it with `huggingface-cli download {}/{}`, or pass a path)",
            tried.join("; "),
            name.org,
            name.name
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hub_names() {
        let n = HubName::parse("Qwen/Qwen3-0.6B").unwrap();
        assert_eq!(
            (n.org.as_str(), n.name.as_str(), n.revision),
            ("Qwen", "Qwen3-0.6B", None)
        );
        let n = HubName::parse("google/gemma-3-270m@refs/pr/1").unwrap();
        assert_eq!(n.revision.as_deref(), Some("refs/pr/1"));
        assert_eq!(n.to_string(), "google/gemma-3-270m@refs/pr/1");
        for bad in [
            "Qwen3",
            "a/b/c",
            "/abs/path",
            "../x/y",
            "org/..",
            "org/na me",
            "org/name@",
            "org/name@../../etc",
            "org/name@a//b",
            "and/or what?",
        ] {
            assert_eq!(HubName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn cache_root_precedence() {
        fn env<'a>(pairs: &'a [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
        }
        let all = [
            ("HF_HUB_CACHE", "/c"),
            ("HF_HOME", "/h"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(hub_cache_root(env(&all)), Some(PathBuf::from("/c")));
        assert_eq!(hub_cache_root(env(&all[1..])), Some(PathBuf::from("/h/hub")));
        assert_eq!(
            hub_cache_root(env(&all[2..])),
            Some(PathBuf::from("/x/huggingface/hub"))
        );
        assert_eq!(
            hub_cache_root(env(&all[3..])),
            Some(PathBuf::from("/home/u/.cache/huggingface/hub"))
        );
        assert_eq!(
            hub_cache_root(env(&[("HF_HUB_CACHE", ""), ("HF_HOME", "/h")])),
            Some(PathBuf::from("/h/hub"))
        );
        assert_eq!(hub_cache_root(env(&[])), None);
    }
}
