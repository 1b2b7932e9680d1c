//! A synthetic transformer training trace, for tests, benchmarks and replay
//! without a GPU or a recorded snapshot.
//!
//! The pattern follows mixed-precision training with Adam: fp32 parameters
//! persist; each step's forward pass saves bf16 activations per layer (plus
//! short-lived temporaries such as attention scores), the loss materialises
//! fp32 logits, the backward pass frees each layer's activations while
//! creating fp32 gradients, and the optimizer creates its two fp32 states on
//! the first step, uses a temporary per parameter, then frees the gradients
//! (`zero_grad(set_to_none=True)`).

use crate::replay::Event;

/// A transformer's shape and batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelShape {
    /// Name used in reports.
    pub name: &'static str,
    /// Transformer blocks.
    pub layers: u64,
    /// Hidden size.
    pub hidden: u64,
    /// Attention heads.
    pub heads: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Sequence length.
    pub seq: u64,
    /// Micro-batch size.
    pub batch: u64,
}

/// A few well-known shapes (layer/hidden/head/vocab counts from the models'
/// published configs: GPT-2 small and medium, BERT-large, a 1.1B Llama).
pub fn presets() -> Vec<ModelShape> {
    vec![
        ModelShape {
            name: "gpt2-small",
            layers: 12,
            hidden: 768,
            heads: 12,
            vocab: 50257,
            seq: 1024,
            batch: 8,
        },
        ModelShape {
            name: "gpt2-medium",
            layers: 24,
            hidden: 1024,
            heads: 16,
            vocab: 50257,
            seq: 1024,
            batch: 4,
        },
        ModelShape {
            name: "bert-large",
            layers: 24,
            hidden: 1024,
            heads: 16,
            vocab: 30522,
            seq: 512,
            batch: 16,
        },
        ModelShape {
            name: "tinyllama-1.1b",
            layers: 22,
            hidden: 2048,
            heads: 32,
            vocab: 32000,
            seq: 2048,
            batch: 2,
        },
    ]
}

struct Gen {
    events: Vec<Event>,
    next: u64,
}

impl Gen {
    fn alloc(&mut self, size: u64) -> u64 {
        let id = self.next;
        self.next += 1;
        self.events.push(Event::Alloc {
            id,
            size,
            stream: 0,
        });
        id
    }
    fn free(&mut self, id: u64) {
        self.events.push(Event::Free { id });
    }
}

/// The events of `steps` training steps of `m`.
pub fn training_events(m: &ModelShape, steps: u32) -> Vec<Event> {
    let mut g = Gen {
        events: Vec::new(),
        next: 0,
    };
    let (h, s, b) = (m.hidden, m.seq, m.batch);
    let tokens = b * s;
    // Parameter shapes of one block: qkv, out-proj, mlp up, mlp down, 2 norms (+ biases).
    let block_params = [
        h * 3 * h,
        3 * h,
        h * h,
        h,
        h * 4 * h,
        4 * h,
        4 * h * h,
        h,
        h,
        h,
        h,
        h,
    ];
    let mut params: Vec<u64> = vec![m.vocab * h, s * h];
    for _ in 0..m.layers {
        params.extend_from_slice(&block_params);
    }
    params.push(h);
    params.push(h);
    let param_ids: Vec<u64> = params.iter().map(|&n| g.alloc(n * 4)).collect();
    let mut opt_states: Vec<u64> = Vec::new();
    for step in 0..steps {
        // Input ids and embeddings.
        let input = g.alloc(tokens * 8);
        let mut saved: Vec<Vec<u64>> = Vec::new();
        let mut x = g.alloc(tokens * h * 2);
        for _ in 0..m.layers {
            let mut keep = vec![x];
            let ln1 = g.alloc(tokens * h * 2);
            keep.push(ln1);
            let qkv = g.alloc(tokens * 3 * h * 2);
            keep.push(qkv);
            let scores = g.alloc(b * m.heads * s * s * 2);
            let probs = g.alloc(b * m.heads * s * s * 2);
            g.free(scores);
            keep.push(probs);
            let ctx = g.alloc(tokens * h * 2);
            keep.push(ctx);
            let attn_out = g.alloc(tokens * h * 2);
            let resid = g.alloc(tokens * h * 2);
            g.free(attn_out);
            keep.push(resid);
            let ln2 = g.alloc(tokens * h * 2);
            keep.push(ln2);
            let up = g.alloc(tokens * 4 * h * 2);
            keep.push(up);
            let act = g.alloc(tokens * 4 * h * 2);
            keep.push(act);
            let down = g.alloc(tokens * h * 2);
            let out = g.alloc(tokens * h * 2);
            g.free(down);
            saved.push(keep);
            x = out;
        }
        let logits = g.alloc(tokens * m.vocab * 4);
        let loss_tmp = g.alloc(tokens * 4);
        let dlogits = g.alloc(tokens * m.vocab * 4);
        g.free(logits);
        g.free(loss_tmp);
        let mut dx = g.alloc(tokens * h * 2);
        g.free(dlogits);
        g.free(x);
        // Gradients of the head, created when the backward pass reaches them.
        let mut grads: Vec<u64> = Vec::new();
        grads.push(g.alloc(params[params.len() - 1] * 4));
        grads.push(g.alloc(params[params.len() - 2] * 4));
        for layer in (0..m.layers as usize).rev() {
            let base = 2 + layer * block_params.len();
            for (j, p) in block_params.iter().enumerate().rev() {
                let tmp = g.alloc(p * 2);
                grads.push(g.alloc(params[base + j] * 4));
                g.free(tmp);
            }
            let d_up = g.alloc(tokens * 4 * h * 2);
            let d_attn = g.alloc(b * m.heads * s * s * 2);
            g.free(d_attn);
            g.free(d_up);
            let new_dx = g.alloc(tokens * h * 2);
            g.free(dx);
            dx = new_dx;
            for id in saved.pop().unwrap_or_default() {
                g.free(id);
            }
        }
        grads.push(g.alloc(params[1] * 4));
        grads.push(g.alloc(params[0] * 4));
        g.free(dx);
        g.free(input);
        // Optimizer: states on the first step, a temporary per parameter.
        if step == 0 {
            for &p in &params {
                opt_states.push(g.alloc(p * 4));
                opt_states.push(g.alloc(p * 4));
            }
        }
        for &p in &params {
            let t = g.alloc(p * 4);
            g.free(t);
        }
        for id in grads {
            g.free(id);
        }
    }
    for id in opt_states {
        g.free(id);
    }
    for id in param_ids {
        g.free(id);
    }
    g.events
}
