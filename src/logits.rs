//! The greedy pick over a step's logits, one definition for the sampler and for the backends
//! that read back only the winning id (their GPU kernel breaks ties the same way).

/// Highest logit, lowest id among ties.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}
