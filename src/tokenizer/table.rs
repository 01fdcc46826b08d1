//! Token texts in one buffer with an open-addressing text → id index.
//!
//! Gemma's 262,144 tokens in a `HashMap<String, u32>` took ~130 ms to build (one allocation and a
//! SipHash per token); this table does it in one buffer and a probe array.

/// Texts `0..len()`, each findable by its exact bytes.
pub(crate) struct TextTable {
    buf: String,
    /// text i is `buf[ends[i - 1]..ends[i]]` (`ends[-1]` = 0)
    ends: Vec<usize>,
    /// id + 1 per slot, 0 = empty; a power of two at least twice the number of texts
    slots: Vec<u32>,
}

fn hash(s: &[u8]) -> u64 {
    // FxHash over 8-byte words, then the splitmix64 finalizer so the low bits used for the slot mix.
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = s.len() as u64;
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    for &b in chunks.remainder() {
        h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl TextTable {
    /// Builds the table; `Err((first id, second id))` names the first text that appears twice.
    pub fn new(texts: &[String]) -> Result<TextTable, (u32, u32)> {
        let n = texts.len();
        let mut t = TextTable {
            buf: String::with_capacity(texts.iter().map(String::len).sum()),
            ends: Vec::with_capacity(n),
            slots: vec![0; (2 * n).next_power_of_two().max(16)],
        };
        for (i, s) in texts.iter().enumerate() {
            t.buf.push_str(s);
            t.ends.push(t.buf.len());
            let mask = t.slots.len() - 1;
            let mut slot = hash(s.as_bytes()) as usize & mask;
            loop {
                match t.slots[slot] {
                    0 => {
                        t.slots[slot] = i as u32 + 1;
                        break;
                    }
                    id1 if t.text(id1 - 1) == s.as_str() => return Err((id1 - 1, i as u32)),
                    _ => slot = (slot + 1) & mask,
                }
            }
        }
        Ok(t)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The text of `id`; panics past `len()` like a slice index.
    pub fn text(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }

    pub fn get(&self, s: &str) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut slot = hash(s.as_bytes()) as usize & mask;
        loop {
            match self.slots[slot] {
                0 => return None,
                id1 if self.text(id1 - 1) == s => return Some(id1 - 1),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len() as u32).map(|i| self.text(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_text_and_nothing_else() {
        let texts: Vec<String> = (0..5000)
            .map(|i| format!("tok{i}"))
            .chain(["".into(), "▁a".into()])
            .collect();
        let t = TextTable::new(&texts).unwrap();
        assert_eq!(t.len(), texts.len());
        for (i, s) in texts.iter().enumerate() {
            assert_eq!(t.get(s), Some(i as u32));
            assert_eq!(t.text(i as u32), s);
        }
        assert_eq!(t.get("tok5000"), None);
        assert_eq!(t.get("▁"), None);
        let dup: Vec<String> = ["a", "b", "a"].iter().map(|s| s.to_string()).collect();
        assert_eq!(TextTable::new(&dup).err(), Some((0, 2)));
    }
}
