"""pytest configuration for the tests of the installed vramkit wheel (.ci/python-tests)."""

# A script, not a pytest module: `cargo test -p vram-torch` runs it against the freshly built
# library, and test_torch_allocator.py runs it against the library inside the wheel.
collect_ignore = ["test_vramkit_torch.py"]
