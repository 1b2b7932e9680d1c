//! Integration tests of vram-plan: checks against published figures and hand calculations.
mod megatron;
