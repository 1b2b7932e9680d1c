from typing import Any, Iterator, Sequence

from torch.utils.data import Sampler

def pack(lengths: Sequence[int], model: Any, gpu: str = ..., **setup: Any) -> dict[str, Any]: ...

class MemoryAwareBatchSampler(Sampler[list[int]]):
    batches: list[list[int]]
    padded_lengths: list[int]
    batch_bytes: list[int]
    too_long: list[int]
    fill: float
    shuffle: bool
    seed: int
    epoch: int
    def __init__(
        self,
        lengths: Sequence[int],
        model: Any,
        gpu: str = ...,
        *,
        shuffle: bool = ...,
        seed: int = ...,
        drop_too_long: bool = ...,
        **setup: Any,
    ) -> None: ...
    def set_epoch(self, epoch: int) -> None: ...
    def __iter__(self) -> Iterator[list[int]]: ...
    def __len__(self) -> int: ...
