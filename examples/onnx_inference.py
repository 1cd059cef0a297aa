"""Run an exported kerasrl policy with onnxruntime and numpy only (no kerasrl, Keras or backend).

    kerasrl train dqn --env CartPole-v1 --out runs/cartpole
    kerasrl export runs/cartpole --format onnx -o cartpole.onnx
    python examples/onnx_inference.py cartpole.onnx

The ONNX file takes float32 observations (batch, *observation_shape), raw as the environment
gives them (normalization and scaling are inside), and returns the actions (batch,); exported
with include_values=True it returns the Q-values (or logits) as a second output. A file exported
from JAX keeps its weights in a second file beside it: keep the two together.
"""

import sys

import numpy as np
import onnxruntime as ort

path = sys.argv[1] if len(sys.argv) > 1 else "cartpole.onnx"
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
inputs = session.get_inputs()[0]
shape = [4 if not isinstance(d, int) or d < 1 else d for d in inputs.shape[1:]]
observations = np.random.default_rng(0).normal(size=(4, *shape)).astype(np.float32)
outputs = session.run(None, {inputs.name: observations})
actions = outputs[0]
print("observations=" + repr(observations.tolist()))
print("actions=" + ",".join(str(int(a)) for a in actions))
if len(outputs) > 1:
    print("values=" + repr(outputs[1].tolist()))
