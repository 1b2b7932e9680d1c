//! Integration tests of vram-model: checks against published figures.

mod activations;
mod bad_input;
mod monotone;
mod params;
mod timeline;
mod zero;
