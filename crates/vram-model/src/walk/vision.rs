//! The vision tower in `generate`: it runs once, before the prefill, and its image features
//! stay until the prefill returns (the tower's bytes: [`crate::mech::vision`]).

use super::{Category, Handle, Phase, Sink, Step};

impl Step<'_> {
    /// The vision tower's forward before `generate`'s prefill: its live tensors and one layer's
    /// high point come and go; the image features stay until [`Step::vision_prefill_end`].
    pub(super) fn vision_prefill<S: Sink>(&self, sink: &mut S) {
        if self.vision.features == 0 {
            return;
        }
        sink.phase(Phase::Prefill { layer: 0 });
        let key = |slot: u64| (1u64 << 57) | slot;
        let live = Handle {
            cat: Category::Activations,
            bytes: self.vision.infer_live,
            key: key(0),
        };
        let tmp = Handle {
            cat: Category::Temporaries,
            bytes: self.vision.infer_tmp,
            key: key(1),
        };
        sink.alloc(live, &[]);
        sink.alloc(tmp, &[]);
        sink.free(tmp);
        sink.alloc(self.vision_features(), &[]);
        sink.free(live);
    }

    /// The prefill returned: the image features go.
    pub(super) fn vision_prefill_end<S: Sink>(&self, sink: &mut S) {
        if self.vision.features > 0 {
            sink.free(self.vision_features());
        }
    }

    fn vision_features(&self) -> Handle {
        Handle {
            cat: Category::Activations,
            bytes: self.vision.features,
            key: (1u64 << 57) | 2,
        }
    }
}
