//! Integration tests of vram-model: checks against published figures.

mod activations;
mod bad_input;
mod blocks;
mod checkpoints;
mod falcon_math;
mod fast_paths;
mod finetune;
mod fit_searches;
mod generate_replay;
mod monotone;
mod params;
mod setups;
mod timeline;
mod vision;
mod warmup;
mod zero;
