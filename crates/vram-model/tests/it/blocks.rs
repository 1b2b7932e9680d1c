//! The layer-by-layer description against the uniform fields it re-expresses.

use vram_model::arch::{Layout, Model};
use vram_model::blocks::{CacheKind, Component, Ffn, Mixer};
use vram_model::catalog;

/// Every catalog transformer: the blocks-derived count equals the uniform fields' exact count,
/// and the components add up to it with the embedding and head where the split puts them.
#[test]
fn blocks_reexpress_every_catalog_transformer_exactly() {
    let mut seen = 0;
    for id in catalog::ids() {
        let Model::Transformer(t) = catalog::lookup(id).unwrap() else {
            continue;
        };
        seen += 1;
        assert!(t.blocks.uniform, "{id}");
        assert_eq!(t.param_count(), t.uniform_param_count(), "{id}");
        let p = t.params_by_component();
        assert_eq!(p.total(), t.param_count(), "{id}");
        let s = t.param_split();
        assert_eq!(p.get(Component::Embedding), s.embedding, "{id}: embedding");
        assert_eq!(
            t.blocks.len() as u64,
            t.layers + t.encoder_layers,
            "{id}: one block per layer"
        );
        // One kind per stack, plus T5's first blocks that hold the relative-position tables.
        let kinds = if t.layout == Layout::EncoderDecoder {
            4
        } else {
            1
        };
        assert_eq!(t.blocks.kinds.len(), kinds, "{id}");
        let experts = p.get(Component::RoutedExperts);
        assert_eq!(experts > 0, t.experts > 1, "{id}: routed experts");
        if t.experts > 1 {
            assert_eq!(experts, t.layers * t.experts * s.per_expert, "{id}");
        }
        assert_eq!(
            p.get(Component::Head) > 0,
            !t.tied_embeddings && t.layout != Layout::EncoderOnly,
            "{id}: untied head"
        );
    }
    assert!(seen >= 20);
}

#[test]
fn catalog_caches_are_full_or_sliding_key_value_caches() {
    let t = match catalog::lookup("llama-3-8b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    // Llama-3-8B: 32 layers × 2 (K, V) × 8 heads × 128 = 65,536 elements per token.
    let by_kind = t.blocks.cache_by_kind(1, 100, 0, 2);
    assert_eq!(by_kind[0], (32, 100 * 65_536 * 2));
    assert!(matches!(t.blocks.layer(0).mixer, Mixer::Attention(_)));
    assert!(matches!(t.blocks.layer(31).ffn, Ffn::Dense(_)));
    let m = match catalog::lookup("mistral-7b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let spec = m.blocks.layer(0).mixer.cache();
    assert_eq!(spec.kind, CacheKind::Sliding);
    assert_eq!(spec.window, Some(4096));
}
