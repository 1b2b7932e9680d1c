"""Regenerates the pickle fixtures of vram-alloc's tests (CPython 3.11 was used).

Run from this folder: python3 make_fixtures.py. Needs no torch: the snapshot is a
plain dict in the shape torch.cuda.memory._snapshot() returns (PyTorch 2.x), pickled
the way torch.cuda.memory._dump_snapshot does (pickle.dump, default protocol).
The two evil_* files would run `echo pwned` if loaded by Python's pickle; never load
them with pickle.load.
"""
import collections
import pickle

frames = [{'filename': 'train.py', 'line': 10, 'name': 'forward'}]
snap = {
    'segments': [
        {'device': 0, 'address': 139900000000000, 'total_size': 20971520, 'allocated_size': 4194304,
         'active_size': 4194304, 'requested_size': 4000000, 'stream': 0, 'segment_type': 'large',
         'segment_pool_id': (0, 0), 'is_expandable': False, 'frames': frames,
         'blocks': [
             {'address': 139900000000000, 'size': 4194304, 'requested_size': 4000000,
              'state': 'active_allocated', 'frames': frames},
             {'address': 139900004194304, 'size': 16777216, 'requested_size': 0,
              'state': 'inactive', 'frames': []},
         ]},
    ],
    'device_traces': [[
        {'action': 'segment_alloc', 'addr': 139900000000000, 'size': 20971520, 'stream': 0, 'time_us': 1, 'frames': frames},
        {'action': 'alloc', 'addr': 139900000000000, 'size': 4194304, 'stream': 0, 'time_us': 2, 'frames': frames},
        {'action': 'alloc', 'addr': 139900004194304, 'size': 8388608, 'stream': 0, 'time_us': 3, 'frames': frames},
        {'action': 'free_requested', 'addr': 139900004194304, 'size': 8388608, 'stream': 0, 'time_us': 4, 'frames': frames},
        {'action': 'free_completed', 'addr': 139900004194304, 'size': 8388608, 'stream': 0, 'time_us': 5, 'frames': frames},
        {'action': 'alloc', 'addr': 139900004194304, 'size': 1048576, 'stream': 0, 'time_us': 6, 'frames': frames},
        {'action': 'free_requested', 'addr': 139900004194304, 'size': 1048576, 'stream': 0, 'time_us': 7, 'frames': frames},
        {'action': 'free_completed', 'addr': 139900004194304, 'size': 1048576, 'stream': 0, 'time_us': 8, 'frames': frames},
    ]],
    'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': None, 'max_split_size': -1,
                           'garbage_collection_threshold': 0.0, 'expandable_segments': False},
}


class Evil:
    def __reduce__(self):
        import os
        return (os.system, ('echo pwned',))


def write(name, data):
    with open(name, 'wb') as f:
        f.write(data)


write('torch_like_snapshot.pickle', pickle.dumps(snap))  # protocol 4: FRAME, MEMOIZE
write('torch_like_snapshot_p2.pickle', pickle.dumps(snap, protocol=2))
od = dict(snap)
od['allocator_settings'] = collections.OrderedDict(snap['allocator_settings'])
write('ordereddict_snapshot.pickle', pickle.dumps(od, protocol=2))  # GLOBAL + REDUCE of OrderedDict
write('evil_reduce.pickle', pickle.dumps({'segments': [], 'x': Evil()}, protocol=4))
write('evil_global_p0.pickle', b"cos\nsystem\n(S'echo pwned'\ntR.")
write('wrong_types.pickle', pickle.dumps({'segments': 'not a list', 'device_traces': []}))
write('not_a_dict.pickle', pickle.dumps([1, 2, 3]))
