"""Several sensors in the exported graph: a Dict observation with image keys beside Box and
Discrete keys.

The training cell sees one packed float32 row (SpaceSpec.obs_parts: the image keys' pixels as
values 0..255 first, then the other keys; encoders.MultiInputEncoder cuts it per key, as SB3's
MultiInputPolicy / CombinedExtractor). The exported graph takes the image keys' raw uint8 frames and the
other keys' float32 row as separate inputs (deploy.graph_io); :class:`PackedInputs` joins them
back into the packed row in front of the very training cell, with ops that are exact (Cast of
uint8 to float32, Reshape, Concat), so the exported graph computes what the training cell
computes, bit for bit."""
from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops


class PackedInputs(nn.Cell):
    """The exported graph of a multi-input policy: its inputs (each image key's uint8 frames,
    then the float32 row of the other keys, then a recurrent cell's h, c, episode_start)
    joined back into the packed row, then ``cell``. ``obs_inputs``: deploy.graph_io.obs_inputs,
    in the packed row's order."""

    def __init__(self, cell: nn.Cell, obs_inputs):
        super().__init__()
        self.cell = cell
        self.kind = getattr(cell, "kind", None)  # a distribution export's kind (the ONNX writer names its outputs)
        self.n_obs = len(obs_inputs)
        self.flat = [(-1, int(i.stop - i.start)) for i in obs_inputs]

    def construct(self, *xs):
        rows = []
        for i in range(self.n_obs):
            rows.append(ops.cast(xs[i].reshape(self.flat[i]), ms.float32))
        return self.cell(ops.concat(rows, 1), *xs[self.n_obs:])
