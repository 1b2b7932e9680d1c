//! The peak-tracking sink of [`super::estimate`].

use super::{Handle, Phase, Sink, TimelinePoint};

/// The peak-tracking sink.
///
/// The breakdown at the peak is copied lazily: allocations only raise the total, so the state
/// at the end of a rising run (the first free after a new peak) is the state at that peak.
#[derive(Debug, Default)]
pub(super) struct PeakSink {
    pub(super) live: [u64; 13],
    pub(super) total: u64,
    pub(super) peak: u64,
    pub(super) rising: bool,
    pub(super) at_peak: [u64; 13],
    pub(super) phase: Option<Phase>,
    pub(super) peak_phase: Option<Phase>,
    pub(super) phase_high: u64,
    pub(super) timeline: Option<Vec<TimelinePoint>>,
}

impl PeakSink {
    pub(super) fn settle(&mut self) {
        if self.rising {
            self.at_peak = self.live;
            self.rising = false;
        }
    }

    /// Ends the walk: the last phase's high goes into its point.
    pub(super) fn finish(&mut self) {
        self.settle();
        if let Some(last) = self.timeline.as_mut().and_then(|t| t.last_mut()) {
            last.high_bytes = self.phase_high;
        }
    }
}

impl Sink for PeakSink {
    #[inline]
    fn alloc(&mut self, h: Handle, _parts: &[u64]) {
        let c = &mut self.live[h.cat as usize];
        *c = c.saturating_add(h.bytes);
        self.total = self.total.saturating_add(h.bytes);
        if self.total > self.phase_high {
            self.phase_high = self.total;
        }
        if self.total > self.peak {
            self.peak = self.total;
            self.rising = true;
            self.peak_phase = self.phase;
        }
    }
    #[inline]
    fn free(&mut self, h: Handle) {
        self.settle();
        let c = &mut self.live[h.cat as usize];
        *c = c.saturating_sub(h.bytes);
        self.total = self.total.saturating_sub(h.bytes);
    }
    #[inline]
    fn phase(&mut self, p: Phase) {
        if let Some(t) = &mut self.timeline {
            // The phase that ends gets its high; the one entered starts at what is live.
            if let Some(last) = t.last_mut() {
                last.high_bytes = self.phase_high;
            }
            t.push(TimelinePoint {
                phase: p,
                live_bytes: self.total,
                high_bytes: self.total,
            });
        }
        self.phase_high = self.total;
        self.phase = Some(p);
    }
}
