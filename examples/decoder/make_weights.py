"""Write ``weights.safetensors`` for ``decoder.yaml``: the token ids, the embedding and every layer's weights.

Run it beside the manifest (``python make_weights.py``, or ``--layers 6``
with ``hetflow run decoder.yaml -p layers=6``); the same arguments always
write the same bytes. Layer ``i``'s weights are ``layers.i.wq`` ...
``layers.i.wd``: the keys the block's ``load`` stages read with
``${index}``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

#: the shapes decoder.yaml's params describe
VOCAB, MODEL, HIDDEN, BATCH, SEQ = 64, 32, 64, 2, 8


def weights(layers: int = 4, seed: int = 7) -> dict[str, np.ndarray]:
    """Every array of the file, drawn from one seeded generator in a fixed order."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    out = {"tokens": rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int64), "embed": normal(VOCAB, MODEL, std=0.5)}
    for i in range(layers):
        for name, shape, std in (("wq", (MODEL, MODEL), 0.15), ("wk", (MODEL, MODEL), 0.15), ("wv", (MODEL, MODEL), 0.15),
                                 ("wo", (MODEL, MODEL), 0.15), ("wu", (MODEL, HIDDEN), 0.15), ("wd", (HIDDEN, MODEL), 0.1)):
            out[f"layers.{i}.{name}"] = normal(*shape, std=std)
    return out


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4, help="how many layers to write (decoder.yaml's layers param)")
    parser.add_argument("-o", "--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights.safetensors"))
    args = parser.parse_args(argv)
    from safetensors.numpy import save_file

    save_file(weights(args.layers), args.output)
    return args.output


if __name__ == "__main__":
    print(main())
