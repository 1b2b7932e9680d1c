//! The training walk: persistent state, micro-batches in schedule order, forward, loss,
//! backward and the optimizer step.

use super::*;
use crate::setup::{Offload, Recompute, Schedule};
use parts::TmpParts;

impl Step<'_> {
    /// Walks the step of pipeline rank `rank` through `sink`.
    ///
    /// `run` says what happens to the state that outlives a step (weights, optimizer states,
    /// workspace): [`Run::Whole`] allocates it at the start and frees it at the end (one step,
    /// as the peak sees it); [`Run::First`] allocates the weights before the step and the
    /// optimizer states in the first optimizer step, as PyTorch does, and keeps both;
    /// [`Run::Later`] finds them allocated and keeps them.
    pub(crate) fn walk<S: Sink>(&self, rank: u64, sink: &mut S, full: bool, run: Run) {
        let par = self.setup.parallel;
        let stack = self.stack(rank);
        let params = self.rank_params(rank, &stack);
        // Gradients and optimizer states: the parameters the forward uses.
        let grad_params = self.rank_grad_params(rank, &stack);
        let o = self.setup.overheads;
        sink.phase(Phase::Setup);
        let (tensors, grad_tensors) = if S::WANTS_PARTS {
            (
                self.rank_tensor_elems(rank, &stack, false),
                self.rank_tensor_elems(rank, &stack, true),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let of = |list: &[u64], bytes_per: u64, factor: f64| -> Vec<u64> {
            list.iter()
                .map(|e| (*e as f64 * bytes_per as f64 * factor) as u64)
                .collect()
        };
        let scaled = |bytes_per: u64, factor: f64| of(&tensors, bytes_per, factor);
        let scaled_g = |bytes_per: u64, factor: f64| of(&grad_tensors, bytes_per, factor);
        let mut key = 1u64 << 60;
        let mut hold = |sink: &mut S, cat: Category, bytes: u64, parts: &[u64], now: bool| {
            key += 1;
            let h = Handle { cat, bytes, key };
            if bytes > 0 && now {
                sink.alloc(h, &fit(parts, bytes));
            }
            h
        };
        let at_start = run != Run::Later;
        let ws = hold(sink, Category::Workspace, o.workspace_bytes, &[], at_start);
        match self.setup.mode {
            Mode::Infer(inf) => {
                let wb = self.bytes.weight.min(self.ctx.cmp);
                let w = match &self.held {
                    // Packed weights as stored: each tensor at its stored bytes.
                    Some(held) => {
                        let v = self.rank_held_bytes(rank, &stack, held);
                        let total = v.iter().sum();
                        hold(sink, Category::Parameters, total, &v, at_start)
                    }
                    None => hold(
                        sink,
                        Category::Parameters,
                        m(&[params, wb]),
                        &scaled(wb, 1.0),
                        at_start,
                    ),
                };
                self.walk_inference(rank, &stack, inf, sink, full);
                if run == Run::Whole && w.bytes > 0 {
                    sink.free(w);
                }
            }
            Mode::Train(tr) => {
                let n = par.dp;
                let z = par.zero;
                let b = self.bytes;
                let offload = tr.offload;
                let shard = |on: bool, v: u64| if on { v.div_ceil(n) } else { v };
                let sharded = |on: bool, v: Vec<u64>| -> Vec<u64> {
                    if on {
                        v.into_iter().map(|x| x.div_ceil(n)).collect()
                    } else {
                        v
                    }
                };
                let w_bytes = if offload == Offload::Params {
                    0
                } else {
                    shard(z >= 3, m(&[params, b.weight]))
                };
                let on_host = offload != Offload::None;
                let master = if on_host {
                    0
                } else {
                    shard(z >= 1, m(&[params, b.master]))
                };
                let states = if on_host {
                    0
                } else {
                    shard(
                        z >= 1,
                        (grad_params as f64 * self.opt_elems * b.state as f64) as u64,
                    )
                };
                let persistent_grads = self.style != AmpStyle::Autocast;
                let grads_full = m(&[grad_params, b.grad]);
                let grads = if !persistent_grads || (on_host && z >= 2) {
                    0
                } else {
                    shard(z >= 2, grads_full)
                };
                let comm = if n > 1 {
                    match (self.style, z) {
                        // DDP buckets (gradient_as_bucket_view=False) for every parameter that
                        // requires grad, those a text-only step leaves without one included.
                        (AmpStyle::Autocast, _) => m(&[params, b.grad]),
                        (AmpStyle::DeepSpeed, _) => m(&[params.min(500_000_000), b.grad]), // reduce bucket
                        (AmpStyle::Megatron, _) => 0,
                    }
                } else {
                    0
                };
                let state_parts = if S::WANTS_PARTS {
                    // One state tensor per parameter and state (Adam's two moments are
                    // created together per parameter).
                    let per = self.opt_elems.ceil().max(1.0) as usize;
                    let each = self.opt_elems / per as f64;
                    let one = scaled_g(b.state, each);
                    let mut v = Vec::with_capacity(one.len() * per);
                    for x in one {
                        v.extend(std::iter::repeat_n(x, per));
                    }
                    sharded(z >= 1, v)
                } else {
                    Vec::new()
                };
                let held = [
                    hold(
                        sink,
                        Category::Parameters,
                        w_bytes,
                        &sharded(z >= 3, scaled(b.weight, 1.0)),
                        at_start,
                    ),
                    hold(
                        sink,
                        Category::MasterWeights,
                        master,
                        &sharded(z >= 1, scaled(b.master, 1.0)),
                        at_start,
                    ),
                    hold(
                        sink,
                        Category::Gradients,
                        grads,
                        &sharded(z >= 2, scaled_g(b.grad, 1.0)),
                        at_start,
                    ),
                    hold(sink, Category::CommBuffers, comm, &[], at_start),
                ];
                // PyTorch creates optimizer states lazily, in the first `step()`.
                let st = hold(
                    sink,
                    Category::OptimizerStates,
                    states,
                    &state_parts,
                    run == Run::Whole,
                );
                self.walk_training(rank, &stack, &tr, sink, full);
                sink.phase(Phase::Optimizer);
                if run == Run::First && st.bytes > 0 {
                    sink.alloc(st, &fit(&state_parts, st.bytes));
                }
                let tmp = match (self.style, tr.optimizer) {
                    // torch.optim's foreach AdamW keeps one param-sized state temporary (sqrt of v).
                    (AmpStyle::Autocast, Optimizer::Adamw) => m(&[grad_params, b.state]),
                    _ => 0,
                };
                let t = hold(
                    sink,
                    Category::Temporaries,
                    tmp,
                    &scaled_g(b.state, 1.0),
                    true,
                );
                if tmp > 0 {
                    sink.free(t);
                }
                if !persistent_grads {
                    // zero_grad(set_to_none=True) frees the gradients after the step.
                    self.free_layer_grads(rank, &stack, &tr, sink);
                }
                if run == Run::Whole {
                    for h in held.into_iter().chain([st]) {
                        if h.bytes > 0 {
                            sink.free(h);
                        }
                    }
                }
            }
        }
        if run == Run::Whole && ws.bytes > 0 {
            sink.free(ws);
        }
    }

    /// Bytes of layer `i`'s parameter tensors at `bytes` per element, one per tensor.
    pub(super) fn layer_tensor_bytes(&self, stack: &Stack, i: u64, bytes: u64) -> Vec<u64> {
        let l = stack.get(i);
        let elems = match stack.kind(i) {
            Some(k) => self.tensors_of(k).to_vec(),
            None => vec![l.matmul_params, l.params - l.matmul_params],
        };
        elems
            .into_iter()
            .filter(|e| *e > 0)
            .map(|e| e * bytes)
            .collect()
    }

    /// The half copies autocast makes of layer `i`'s weights, one tensor per cast, `total`
    /// bytes in all. Autocast casts each `F.linear`'s weight (and bias) as the call reaches it
    /// and keeps the copy in its cast cache (`cached_cast` in PyTorch 2.11's
    /// `aten/src/ATen/autocast_mode.cpp`): one allocation per weight, never one per layer, so
    /// the caching allocator sees 32, 8, 8, 32, 112, 112, 112 MiB blocks for a Llama-3-8B
    /// layer rather than one 416 MiB block. The matrices come from the layer's tensor list;
    /// what `total` holds beyond them (bias copies) is one more small tensor. Layers not
    /// described tensor by tensor (CNN layers: one convolution each) give one tensor.
    pub(super) fn cast_copy_parts(&self, stack: &Stack, i: u64, total: u64) -> Vec<u64> {
        let Model::Transformer(t) = self.model else {
            return vec![total];
        };
        let c = self.ctx.cmp;
        let mut v: Vec<u64> = self
            .layer_tensor_bytes(stack, i, c)
            .into_iter()
            .filter(|&b| b > m(&[t.hidden(), c]))
            .collect();
        let sum: u64 = v.iter().sum();
        if sum > total {
            return vec![total];
        }
        if total > sum {
            v.push(total - sum);
        }
        v
    }

    /// Whether the loss path soft-caps the logits (`final_logit_softcapping` under
    /// transformers).
    pub(super) fn softcap(&self) -> bool {
        self.style != AmpStyle::Megatron
            && matches!(self.model, Model::Transformer(t) if t.blocks.head.softcap)
    }

    /// Element counts of rank `rank`'s parameter tensors.
    pub(super) fn weight_tensor_elems(&self, rank: u64) -> Vec<u64> {
        self.rank_tensor_elems(rank, &self.stack(rank), false)
    }

    /// Bytes per element of the weights as the forward pass reads them.
    pub(super) fn weight_bytes(&self) -> u64 {
        match self.setup.mode {
            Mode::Infer(_) => self.bytes.weight.min(self.ctx.cmp),
            Mode::Train(_) => self.bytes.weight,
        }
    }

    /// Element counts of the parameter tensors this rank holds (after TP), one per tensor;
    /// `grads_only`: only those that get gradients ([`LayerDesc::grad_params`]).
    pub(super) fn rank_tensor_elems(&self, rank: u64, stack: &Stack, grads_only: bool) -> Vec<u64> {
        let mut v = Vec::new();
        let [emb, head] = if grads_only {
            self.edge_grad_params(rank)
        } else {
            self.edge_params(rank)
        };
        match stack {
            Stack::Blocks { pattern, kinds } => {
                if emb > 0 {
                    v.push(emb);
                }
                for k in pattern.iter() {
                    if !(grads_only && kinds[*k as usize].no_grad) {
                        v.extend_from_slice(self.tensors_of(*k as usize));
                    }
                }
                if head > 0 {
                    v.push(head);
                }
            }
            Stack::List(_) => {
                for i in 0..stack.len() {
                    let l = stack.get(i);
                    if grads_only && l.no_grad {
                        continue;
                    }
                    v.push(l.matmul_params);
                    v.push(l.params - l.matmul_params);
                }
                v.push(head);
            }
        }
        v.retain(|e| *e > 0);
        v
    }

    pub(super) fn recomputed(&self, tr: &crate::setup::Train, i: u64) -> bool {
        tr.recompute == Recompute::Full && tr.recompute_layers.is_none_or(|k| i < k)
    }

    pub(super) fn selective(&self, tr: &crate::setup::Train, i: u64) -> bool {
        tr.recompute == Recompute::Selective && tr.recompute_layers.is_none_or(|k| i < k)
    }

    /// Where layer `i`'s backward is walked in two halves (a recomputed layer whose gradients
    /// are created in it): (bytes of the feed-forward's recomputed saved tensors, elements of
    /// the feed-forward's last projection, whose gradient comes first).
    pub(super) fn ffn_split(&self, stack: &Stack, i: u64, l: &LayerDesc) -> Option<(u64, u64)> {
        stack.kind(i)?;
        if l.ffn_from == 0 || l.ffn_from >= l.parts.n {
            return None;
        }
        let saved: u64 = l.parts.bytes[l.ffn_from as usize..l.parts.n as usize]
            .iter()
            .sum();
        Some((saved.min(l.saved_all), l.ffn_first_grad.min(l.params)))
    }

    /// Of layer `i`'s tensors, those whose gradients the mixer's backward makes after its
    /// temporaries: every mixer tensor but the output projection, whose node runs first
    /// (`Step::kind_mixer_late`), where the walk follows autograd's node order
    /// (`Step::late_mixer_grads`): (their bytes at `bytes` per element, one per tensor, as
    /// `layer_tensor_bytes` lists them; their elements); none otherwise, when every gradient of
    /// the layer comes before its temporaries.
    pub(super) fn mixer_late(&self, stack: &Stack, i: u64, bytes: u64) -> (Vec<u64>, u64) {
        let Some(k) = stack.kind(i).filter(|_| self.late_mixer_grads) else {
            return (Vec::new(), 0);
        };
        let late = self
            .tensors_of(k)
            .iter()
            .zip(&self.kind_mixer_late[k])
            .filter(|(e, l)| **l && **e > 0)
            .map(|(e, _)| *e);
        (late.clone().map(|e| e * bytes).collect(), late.sum())
    }

    /// Key of layer `i`'s gradients.
    pub(super) fn grad_key(i: u64) -> u64 {
        (1 << 58) | (i << 2)
    }

    /// Key of the embedding's (`j = 0`) or the head's (`j = 1`) gradients.
    pub(super) fn edge_grad_key(j: u64) -> u64 {
        (1 << 58) | (j + 1)
    }

    pub(super) fn free_layer_grads<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        tr: &crate::setup::Train,
        sink: &mut S,
    ) {
        let g = self.bytes.grad;
        for i in 0..stack.len() {
            let l = stack.get(i);
            if l.no_grad {
                continue;
            }
            let split = if self.recomputed(tr, i) {
                self.ffn_split(stack, i, l)
            } else {
                None
            };
            let ffn = split.map_or(0, |(_, first)| first);
            if ffn > 0 {
                sink.free(Handle {
                    cat: Category::Gradients,
                    bytes: m(&[ffn, g]),
                    key: Self::grad_key(i) | 3,
                });
            }
            let (_, mixer) = self.mixer_late(stack, i, g);
            if mixer > 0 {
                sink.free(Handle {
                    cat: Category::Gradients,
                    bytes: m(&[mixer, g]),
                    key: Self::grad_key(i) | 1,
                });
            }
            sink.free(Handle {
                cat: Category::Gradients,
                bytes: m(&[l.params - ffn - mixer, g]),
                key: Self::grad_key(i),
            });
        }
        for (j, p) in self.edge_grad_params(rank).into_iter().enumerate() {
            if p > 0 {
                sink.free(Handle {
                    cat: Category::Gradients,
                    bytes: m(&[p, g]),
                    key: Self::edge_grad_key(j as u64),
                });
            }
        }
    }

    /// (embedding params, head params) present on `rank`.
    pub(super) fn edge_params(&self, rank: u64) -> [u64; 2] {
        let last = self.setup.parallel.pp - 1;
        [
            if rank == 0 { self.emb_params } else { 0 },
            if rank == last { self.head_params } else { 0 },
        ]
    }

    /// Of [`Self::edge_params`], those that get gradients (a text-only step's vision tower
    /// gets none: `emb_no_grad`).
    pub(super) fn edge_grad_params(&self, rank: u64) -> [u64; 2] {
        let [emb, head] = self.edge_params(rank);
        [if rank == 0 { emb - self.emb_no_grad } else { 0 }, head]
    }

    /// The training micro-batches of one rank in schedule order: forwards and backwards.
    pub(super) fn walk_training<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        tr: &crate::setup::Train,
        sink: &mut S,
        full: bool,
    ) {
        let par = self.setup.parallel;
        let p = par.pp;
        let micro = tr.grad_accum;
        let (chunks, in_flight) = if p == 1 {
            (1, 1)
        } else {
            match par.schedule {
                Schedule::Gpipe => (1, micro),
                Schedule::OneFOneB => (1, (p - rank).min(micro)),
                Schedule::Interleaved(v) => {
                    (v, ((p - rank - 1) * 2 + (v - 1) * p + 1).min(micro * v))
                }
            }
        };
        let units = micro * chunks;
        // After `in_flight + 1` units the live set repeats; a peak-only walk stops there.
        let simulate = if full {
            units
        } else {
            units.min(in_flight + 1)
        };
        let per_chunk = stack.len().div_ceil(chunks);
        let mut grads_live = false;
        let (mut next_fwd, mut next_bwd) = (0u64, 0u64);
        while next_bwd < simulate {
            let can_fwd = next_fwd < simulate && next_fwd - next_bwd < in_flight;
            if can_fwd {
                self.forward_unit(rank, stack, tr, next_fwd, chunks, per_chunk, sink);
                next_fwd += 1;
            } else {
                self.backward_unit(
                    rank,
                    stack,
                    tr,
                    next_bwd,
                    chunks,
                    per_chunk,
                    !grads_live,
                    sink,
                );
                grads_live = true;
                next_bwd += 1;
            }
        }
    }

    pub(super) fn unit_layers(
        &self,
        stack: &Stack,
        unit: u64,
        chunks: u64,
        per_chunk: u64,
    ) -> (u64, u64, bool, bool) {
        let chunk = unit % chunks;
        let first = chunk * per_chunk;
        let end = (first + per_chunk).min(stack.len());
        (first, end, chunk == 0, chunk == chunks - 1)
    }

    /// Key of tensor group `slot` (< 64) of `layer` (< 2^25) in micro-batch `unit` (< 2^25).
    /// Layer-less groups (embedding, loss) use `layer` 0 and slots from 32 up.
    pub(super) fn act_key(unit: u64, layer: u64, slot: u64) -> u64 {
        (unit << 32) | (layer << 6) | slot
    }

    /// The key of slot `slot` of layer `layer`'s checkpointed forward program: apart from
    /// [`Step::act_key`]'s (bit 31 set; layers stay below 2^23).
    fn program_key(unit: u64, layer: u64, slot: u8) -> u64 {
        (unit << 32) | (1 << 31) | (layer << 8) | u64::from(slot)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_unit<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        tr: &crate::setup::Train,
        unit: u64,
        chunks: u64,
        per_chunk: u64,
        sink: &mut S,
    ) {
        let (first, end, first_chunk, last_chunk) =
            self.unit_layers(stack, unit, chunks, per_chunk);
        let last_rank = rank == self.setup.parallel.pp - 1;
        let c = self.ctx;
        let autocast_copies =
            self.style == AmpStyle::Autocast && c.cmp != 4 && self.bytes.weight == 4;
        let zero3 = self.setup.parallel.zero == 3;
        if rank == 0 && first_chunk && self.emb_saved > 0 {
            sink.phase(Phase::Forward {
                micro: unit as u32,
                layer: 0,
            });
            sink.alloc(
                Handle {
                    cat: Category::Activations,
                    bytes: self.emb_saved,
                    key: Self::act_key(unit, 0, 40),
                },
                &[],
            );
        }
        for i in first..end {
            let l = stack.get(i);
            sink.phase(Phase::Forward {
                micro: unit as u32,
                layer: i as u32,
            });
            if autocast_copies {
                let bytes = m(&[l.matmul_params, c.cmp]);
                let parts = if S::WANTS_PARTS {
                    self.cast_copy_parts(stack, i, bytes)
                } else {
                    Vec::new()
                };
                sink.alloc(
                    Handle {
                        cat: Category::WeightCopies,
                        bytes,
                        key: Self::act_key(unit, i, 1),
                    },
                    &parts,
                );
            }
            let gathered = Handle {
                cat: Category::WeightCopies,
                bytes: m(&[l.params, self.bytes.weight, 2]),
                key: Self::act_key(unit, i, 2),
            };
            if zero3 {
                sink.alloc(gathered, &[]); // this layer and the prefetched next one
            }
            let saved = self.saved_handle(tr, unit, i, l);
            let parts = if S::WANTS_PARTS && !self.recomputed(tr, i) {
                l.parts.list(self.selective(tr, i))
            } else {
                Vec::new()
            };
            let tmp = Handle {
                cat: Category::Temporaries,
                bytes: if self.recomputed(tr, i) {
                    l.saved_all.saturating_add(l.fwd_tmp)
                } else {
                    l.fwd_tmp
                },
                key: Self::act_key(unit, i, 3),
            };
            // Saved tensors made before the temporary (cuDNN's workspace right after the
            // convolution's output), then the temporary, then the rest under the same key:
            // they go together in backward.
            let split = if self.recomputed(tr, i) {
                0
            } else {
                usize::from(l.tmp_after)
            };
            let first: u64 = l.parts.bytes[..split].iter().sum();
            let tmp_early = split > 0 && first < saved.bytes;
            if tmp_early {
                let cut = split.min(parts.len());
                sink.alloc(
                    Handle {
                        bytes: first,
                        ..saved
                    },
                    &parts[..cut],
                );
                sink.alloc(tmp, &[]);
                sink.free(tmp);
                sink.alloc(
                    Handle {
                        bytes: saved.bytes - first,
                        ..saved
                    },
                    &parts[cut..],
                );
            } else {
                sink.alloc(saved, &parts);
            }
            if l.fwd_kept > 0 {
                sink.alloc(
                    Handle {
                        cat: Category::Activations,
                        bytes: l.fwd_kept,
                        key: Self::act_key(unit, i, 9),
                    },
                    &[l.fwd_kept / 2, l.fwd_kept / 2],
                );
            }
            let program = match stack.kind(i) {
                Some(k) if self.recomputed(tr, i) => self.checkpointed.get(k),
                _ => None,
            };
            if let Some(ops) = program {
                // The checkpointed forward, tensor by tensor (`walks_checkpointed_ops`). Its
                // input is the checkpoint's (`saved`), its output the next layer's.
                let mut sizes = [0u64; 256];
                for &(slot, bytes) in ops {
                    if slot == crate::mech::step::X {
                        continue;
                    }
                    let h = |bytes| Handle {
                        cat: Category::Temporaries,
                        bytes,
                        key: Self::program_key(unit, i, slot),
                    };
                    if bytes == crate::mech::step::FREE {
                        sink.free(h(sizes[slot as usize]));
                    } else {
                        sizes[slot as usize] = bytes;
                        sink.alloc(h(bytes), &[]);
                    }
                }
            } else if !tmp_early {
                let tmp_parts = if S::WANTS_PARTS {
                    let fwd = TmpParts::of(&l.tmp_parts.fwd, l.fwd_tmp);
                    if self.recomputed(tr, i) {
                        // The checkpointed forward under no_grad: what it would save, then goes.
                        let mut v = l.parts.list(false);
                        v.extend(fwd);
                        TmpParts::of(&v, tmp.bytes)
                    } else {
                        fwd
                    }
                } else {
                    Vec::new()
                };
                sink.alloc(tmp, &tmp_parts);
                sink.free(tmp);
            }
            if zero3 {
                sink.free(gathered);
            }
        }
        if last_rank && last_chunk {
            sink.phase(Phase::Loss { micro: unit as u32 });
            self.loss_forward(unit, sink);
        }
        // The model's forward returns: what it kept only for its own output goes.
        for i in first..end {
            let l = stack.get(i);
            if l.fwd_kept > 0 {
                sink.free(Handle {
                    cat: Category::Activations,
                    bytes: l.fwd_kept,
                    key: Self::act_key(unit, i, 9),
                });
            }
        }
        if last_rank && last_chunk && autocast_copies && self.style == AmpStyle::Autocast {
            // Leaving autocast clears its cast cache: copies of recomputed layers go.
            for i in first..end {
                if self.recomputed(tr, i) {
                    let l = stack.get(i);
                    sink.free(Handle {
                        cat: Category::WeightCopies,
                        bytes: m(&[l.matmul_params, c.cmp]),
                        key: Self::act_key(unit, i, 1),
                    });
                }
            }
        }
    }

    pub(super) fn saved_handle(
        &self,
        tr: &crate::setup::Train,
        unit: u64,
        i: u64,
        l: &LayerDesc,
    ) -> Handle {
        if self.recomputed(tr, i) {
            Handle {
                cat: Category::Activations,
                bytes: l.checkpoint,
                key: Self::act_key(unit, i, 8),
            }
        } else {
            Handle {
                cat: Category::Activations,
                bytes: l.saved(self.selective(tr, i)),
                key: Self::act_key(unit, i, 4),
            }
        }
    }

    pub(super) fn loss_keys(unit: u64) -> [u64; 8] {
        std::array::from_fn(|j| Self::act_key(unit, 0, 32 + j as u64))
    }

    pub(super) fn loss_forward<S: Sink>(&self, unit: u64, sink: &mut S) {
        let k = Self::loss_keys(unit);
        let c = self.ctx;
        sink.alloc(
            Handle {
                cat: Category::Activations,
                bytes: self.head_saved,
                key: k[0],
            },
            &[],
        );
        if self.logits == 0 {
            return;
        }
        let logits = Handle {
            cat: Category::Loss,
            bytes: m(&[self.logits, c.cmp]),
            key: k[1],
        };
        if self.softcap() {
            // Gemma 2: logits / c, tanh (its output saved), · c, each a new logits-sized tensor.
            let t = |j: usize| Handle {
                cat: Category::Loss,
                bytes: m(&[self.logits, c.cmp]),
                key: k[j],
            };
            sink.alloc(t(6), &[]);
            sink.alloc(t(7), &[]);
            sink.free(t(6));
            sink.alloc(t(6), &[]);
            sink.free(t(7));
            // t(6) now holds the saved tanh output.
        }
        sink.alloc(logits, &[]);
        let upcast = Handle {
            cat: Category::Loss,
            bytes: m(&[self.logits, 4]),
            key: k[2],
        };
        if c.cmp != 4 {
            sink.alloc(upcast, &[]);
        }
        sink.alloc(
            Handle {
                cat: Category::Loss,
                bytes: m(&[self.logits, 4]),
                key: k[3],
            },
            &[],
        ); // log-softmax
        if c.cmp != 4 {
            sink.free(upcast);
        }
        sink.free(logits); // the training loop drops the model output before backward
    }

    /// The loss's backward, then the head's, which makes the head's weight gradient
    /// (`head_grad`, when this backward creates it) once the fp32 logit gradients are gone.
    pub(super) fn loss_backward<S: Sink>(
        &self,
        unit: u64,
        head_grad: Option<Handle>,
        sink: &mut S,
    ) {
        let k = Self::loss_keys(unit);
        let c = self.ctx;
        let grad = |sink: &mut S| {
            if let Some(h) = head_grad {
                sink.alloc(h, &[]);
            }
        };
        if self.logits == 0 {
            grad(sink);
        }
        if self.logits > 0 {
            let f32b = m(&[self.logits, 4]);
            let g1 = Handle {
                cat: Category::Loss,
                bytes: f32b,
                key: k[4],
            };
            let g2 = Handle {
                cat: Category::Loss,
                bytes: f32b,
                key: k[5],
            };
            sink.alloc(g1, &[]);
            sink.alloc(g2, &[]);
            sink.free(g1);
            sink.free(Handle {
                cat: Category::Loss,
                bytes: f32b,
                key: k[3],
            });
            let g3 = Handle {
                cat: Category::Loss,
                bytes: m(&[self.logits, c.cmp]),
                key: k[1],
            };
            if c.cmp != 4 {
                sink.alloc(g3, &[]);
                sink.free(g2);
                grad(sink);
                sink.free(g3);
            } else {
                grad(sink);
                sink.free(g2);
            }
        }
        if self.softcap() {
            sink.free(Handle {
                cat: Category::Loss,
                bytes: m(&[self.logits, c.cmp]),
                key: k[6],
            });
        }
        sink.free(Handle {
            cat: Category::Activations,
            bytes: self.head_saved,
            key: k[0],
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward_unit<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        tr: &crate::setup::Train,
        unit: u64,
        chunks: u64,
        per_chunk: u64,
        first_time: bool,
        sink: &mut S,
    ) {
        let (first, end, first_chunk, last_chunk) =
            self.unit_layers(stack, unit, chunks, per_chunk);
        let last_rank = rank == self.setup.parallel.pp - 1;
        let c = self.ctx;
        let g = self.bytes.grad;
        let lazy_grads = self.style == AmpStyle::Autocast && (first_time || unit < chunks);
        let autocast_copies =
            self.style == AmpStyle::Autocast && c.cmp != 4 && self.bytes.weight == 4;
        let zero3 = self.setup.parallel.zero == 3;
        let [emb_p, head_p] = self.edge_grad_params(rank);
        if last_rank && last_chunk {
            sink.phase(Phase::Loss { micro: unit as u32 });
            let head_grad = (lazy_grads && head_p > 0).then_some(Handle {
                cat: Category::Gradients,
                bytes: m(&[head_p, g]),
                key: Self::edge_grad_key(1),
            });
            self.loss_backward(unit, head_grad, sink);
        }
        // Temporaries a layer's backward left for the next one to consume (by slot).
        let mut handed = [0u64; 8];
        let slot = |layer: u64, n: u8, bytes: u64| Handle {
            cat: Category::Temporaries,
            bytes,
            key: Self::act_key(unit, layer, 10 + u64::from(n)),
        };
        for i in (first..end).rev() {
            let l = stack.get(i);
            sink.phase(Phase::Backward {
                micro: unit as u32,
                layer: i as u32,
            });
            let gathered = Handle {
                cat: Category::WeightCopies,
                bytes: m(&[l.params, self.bytes.weight, 2]),
                key: Self::act_key(unit, i, 2),
            };
            if zero3 {
                sink.alloc(gathered, &[]);
            }
            let recomputed = self.recomputed(tr, i);
            let copies = Handle {
                cat: Category::WeightCopies,
                bytes: m(&[l.matmul_params, c.cmp]),
                key: Self::act_key(unit, i, 1),
            };
            // Under recomputation with lazily created gradients, the backward is walked in two
            // halves: the feed-forward's nodes run first, creating its weights' gradients and
            // releasing its recomputed tensors one by one (torch.utils.checkpoint's
            // non-reentrant unpack hook drops each recomputed tensor once its node has read it;
            // transformers 5.x checkpoints with `use_reentrant=False`), then the mixer's.
            let split = if recomputed && lazy_grads {
                self.ffn_split(stack, i, l)
            } else {
                None
            };
            let ffn_saved = split.map_or(0, |(b, _)| b);
            let re = Handle {
                cat: Category::Activations,
                bytes: l.saved_all - ffn_saved,
                key: Self::act_key(unit, i, 5),
            };
            let re_ffn = Handle {
                cat: Category::Activations,
                bytes: ffn_saved,
                key: Self::act_key(unit, i, 7),
            };
            if recomputed {
                if autocast_copies {
                    let parts = if S::WANTS_PARTS {
                        self.cast_copy_parts(stack, i, copies.bytes)
                    } else {
                        Vec::new()
                    };
                    sink.alloc(copies, &parts);
                }
                let list = if S::WANTS_PARTS {
                    l.parts.list(false)
                } else {
                    Vec::new()
                };
                let cut = if split.is_some() {
                    (l.ffn_from as usize).min(list.len())
                } else {
                    list.len()
                };
                sink.alloc(re, &list[..cut]);
                if split.is_some() {
                    sink.alloc(re_ffn, &list[cut..]);
                }
            }
            // The mixer's gradients made after its temporaries: (tensors, elements).
            let (late_grads, late_elems) = self.mixer_late(stack, i, g);
            let mut mixer_grads: Option<Vec<u64>> = None;
            if lazy_grads && !l.no_grad {
                let parts = if S::WANTS_PARTS {
                    self.layer_tensor_bytes(stack, i, g)
                } else {
                    Vec::new()
                };
                if let Some((_, first_grad)) = split {
                    // The feed-forward's last projection's gradient, then its backward's
                    // temporaries; its recomputed tensors go; then every other gradient of the
                    // layer, and the mixer's backward.
                    sink.alloc(
                        Handle {
                            cat: Category::Gradients,
                            bytes: m(&[first_grad, g]),
                            key: Self::grad_key(i) | 3,
                        },
                        &[],
                    );
                    let tmp = Handle {
                        cat: Category::Temporaries,
                        bytes: l.ffn_bwd_tmp,
                        key: Self::act_key(unit, i, 6),
                    };
                    sink.alloc(tmp, &[]);
                    sink.free(tmp);
                    sink.free(re_ffn);
                    // The feed-forward's other gradients, the norms' and the mixer's output
                    // projection's; the mixer's others come as its backward runs, after its
                    // temporaries (`mixer_grads`).
                    let mut rest = parts.clone();
                    for b in std::iter::once(m(&[first_grad, g])).chain(late_grads.iter().copied())
                    {
                        if let Some(j) = rest.iter().position(|x| *x == b) {
                            rest.remove(j);
                        }
                    }
                    sink.alloc(
                        Handle {
                            cat: Category::Gradients,
                            bytes: m(&[l.params - first_grad - late_elems, g]),
                            key: Self::grad_key(i),
                        },
                        &rest,
                    );
                    mixer_grads = (late_elems > 0).then(|| late_grads.clone());
                } else {
                    // Every gradient but the mixer's late ones (`mixer_grads`).
                    let mut rest = parts.clone();
                    for b in &late_grads {
                        if let Some(j) = rest.iter().position(|x| x == b) {
                            rest.remove(j);
                        }
                    }
                    sink.alloc(
                        Handle {
                            cat: Category::Gradients,
                            bytes: m(&[l.params - late_elems, g]),
                            key: Self::grad_key(i),
                        },
                        &rest,
                    );
                    mixer_grads = (late_elems > 0).then(|| late_grads.clone());
                }
            }
            if l.bwd_prog.is_empty() {
                let tmp = Handle {
                    cat: Category::Temporaries,
                    bytes: if split.is_some() {
                        l.mixer_bwd_tmp
                    } else {
                        l.bwd_tmp
                    },
                    key: Self::act_key(unit, i, 6),
                };
                // The backward's temporaries (or the split backward's mixer half) are their
                // tensors (`TmpParts::of` falls back to one block when the list does not make
                // up the bytes).
                let parts = if S::WANTS_PARTS {
                    let list = if split.is_some() {
                        &l.tmp_parts.mixer_bwd
                    } else {
                        &l.tmp_parts.bwd
                    };
                    TmpParts::of(list, tmp.bytes)
                } else {
                    Vec::new()
                };
                sink.alloc(tmp, &parts);
                sink.free(tmp);
            } else {
                let mut mine = [0u64; 8];
                for op in l.bwd_prog.steps() {
                    match op {
                        TmpOp::Alloc(n, bytes) => {
                            mine[n as usize] = bytes;
                            sink.alloc(slot(i, n, bytes), &[]);
                        }
                        TmpOp::Free(n) => {
                            let bytes = std::mem::take(&mut mine[n as usize]);
                            if bytes > 0 {
                                sink.free(slot(i, n, bytes));
                            }
                        }
                        TmpOp::FreeHanded(n) => {
                            let bytes = std::mem::take(&mut handed[n as usize]);
                            if bytes > 0 {
                                sink.free(slot(i + 1, n, bytes));
                            }
                        }
                        TmpOp::End => break,
                    }
                }
                handed = mine;
            }
            if let Some(grads) = mixer_grads {
                sink.alloc(
                    Handle {
                        cat: Category::Gradients,
                        bytes: m(&[late_elems, g]),
                        key: Self::grad_key(i) | 1,
                    },
                    &grads,
                );
            }
            sink.free(self.saved_handle(tr, unit, i, l));
            if recomputed {
                sink.free(re);
            }
            if autocast_copies {
                sink.free(copies);
            }
            if zero3 {
                sink.free(gathered);
            }
        }
        for (n, bytes) in (0u8..).zip(handed) {
            if bytes > 0 {
                sink.free(slot(first, n, bytes));
            }
        }
        if rank == 0 && first_chunk {
            if lazy_grads && emb_p > 0 {
                sink.alloc(
                    Handle {
                        cat: Category::Gradients,
                        bytes: m(&[emb_p, g]),
                        key: Self::edge_grad_key(0),
                    },
                    &[],
                );
            }
            if self.emb_saved > 0 {
                sink.free(Handle {
                    cat: Category::Activations,
                    bytes: self.emb_saved,
                    key: Self::act_key(unit, 0, 40),
                });
            }
        }
    }
}

/// Per-tensor sizes adjusted so they sum to `total` exactly (shares rounded per tensor, as
/// ZeRO's partitions or fractional optimizer states are, can drift by a few bytes); the last
/// tensor absorbs the difference. Empty stays empty (one tensor of `total`).
fn fit(parts: &[u64], total: u64) -> Vec<u64> {
    let mut v = parts.to_vec();
    let sum: u64 = v.iter().sum();
    if let Some(last) = v.last_mut() {
        if sum > total {
            *last = last.saturating_sub(sum - total);
        } else {
            *last += total - sum;
        }
    }
    v.retain(|x| *x > 0);
    v
}
