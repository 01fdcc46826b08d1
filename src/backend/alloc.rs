//! Activation buffers for a graph, by liveness: nodes are placed in order, each in the smallest
//! free buffer that holds it (else a new one), and a node's buffer returns to the pool after
//! its last reader. Backend-neutral: sizes are in whatever unit the backend allocates (CPU: f32
//! elements, GPU: bytes). A node never gets the buffer of an input it reads.

use crate::model::Graph;

pub struct Liveness {
    /// The node after which each node's value is dead (`usize::MAX`: never — the result and
    /// the key's kept node).
    last_use: Vec<usize>,
    /// Size of each buffer.
    pub sizes: Vec<u64>,
    /// Buffers free for the next node.
    free: Vec<usize>,
    /// The buffer of each node placed so far.
    pub buf_of: Vec<usize>,
}

impl Liveness {
    pub fn new(g: &Graph) -> Liveness {
        let mut last_use = vec![0usize; g.nodes.len()];
        for (i, node) in g.nodes.iter().enumerate() {
            for j in node.op.inputs() {
                last_use[j] = i;
            }
        }
        for keep in [Some(g.result), g.key.keep].into_iter().flatten() {
            if let Some(r) = last_use.get_mut(keep) {
                *r = usize::MAX;
            }
        }
        Liveness {
            last_use,
            sizes: Vec::new(),
            free: Vec::new(),
            buf_of: vec![0; g.nodes.len()],
        }
    }

    /// Places node `i` (nodes in order) of `size`, then frees the buffers of the inputs it read
    /// last. Returns its buffer.
    pub fn place(&mut self, g: &Graph, i: usize, size: u64) -> usize {
        // Best fit among free buffers, else a new one.
        let pick = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, &b)| self.sizes[b] >= size)
            .min_by_key(|(_, &b)| self.sizes[b])
            .map(|(fi, _)| fi);
        let out = match pick {
            Some(fi) => self.free.swap_remove(fi),
            None => self.add(size),
        };
        self.place_at(g, i, out)
    }

    /// Places node `i` in `buf` (`place`'s pick, or the buffer of a live node it overwrites: a
    /// fused op writing in place), then frees the buffers of the inputs it read last.
    pub fn place_at(&mut self, g: &Graph, i: usize, buf: usize) -> usize {
        self.buf_of[i] = buf;
        for j in g.nodes[i].op.inputs() {
            let b = self.buf_of[j];
            if self.last_use[j] == i && !self.free.contains(&b) && b != buf {
                self.free.push(b);
            }
        }
        buf
    }

    /// Node `i` is not computed: its readers read `i`'s input `x` in its place (a fused op, such
    /// as a rope the attention applies as it reads, or a norm the matmuls apply). `i` shares
    /// `x`'s buffer, which stays live until the last reader of either and is freed there.
    pub fn alias(&mut self, i: usize, x: usize) {
        self.buf_of[i] = self.buf_of[x];
        let end = self.last_use[x].max(self.last_use[i]);
        self.last_use[x] = end;
        self.last_use[i] = end;
    }

    /// The node after which node `i`'s value is dead.
    pub fn last_use(&self, i: usize) -> usize {
        self.last_use[i]
    }

    /// A buffer outside the pool (never freed, never reused for a node): scratch.
    pub fn add(&mut self, size: u64) -> usize {
        self.sizes.push(size);
        self.sizes.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Node, Op};

    fn node(op: Op, width: usize) -> Node {
        Node {
            name: "n".into(),
            op,
            width,
            rows: 1,
        }
    }

    /// a → b → c → d: b reuses nothing (a is still read), c takes a's buffer, d b's; the result
    /// stays live.
    #[test]
    fn buffers_return_after_the_last_reader_best_fit() {
        let nodes = vec![
            node(Op::GetRows { weight: "e".into() }, 8),
            node(Op::Scale { x: 0, s: 1.0 }, 8),
            node(Op::Scale { x: 1, s: 1.0 }, 4),
            node(Op::Scale { x: 2, s: 1.0 }, 8),
        ];
        let g = Graph {
            key: crate::model::GraphKey::new(1, 1),
            result: 3,
            nodes,
        };
        let mut l = Liveness::new(&g);
        let bufs: Vec<usize> = (0..4).map(|i| l.place(&g, i, g.nodes[i].width as u64)).collect();
        assert_eq!(bufs, [0, 1, 0, 1]);
        assert_eq!(l.sizes, [8, 8]);
    }
}
