//! Integration tests of vram-plan: checks against published figures and hand calculations.

mod batching;
mod capacity_advice;
mod checkpoint;
mod emit;
mod generate;
mod guidance;
mod measured;
mod megatron;
mod search;
mod storage;
