#!/usr/bin/env bash
# The wheels that benchmarks/on_gpu.sh installs on this project's lent GPU machines (Python 3.12,
# CUDA builds of JAX and PyTorch already there, no network): downloaded here into .whl/ (ignored
# by git; about 15 MB). As used on 2026-11-27 (NVIDIA H100): Keras and Gymnasium; rejax and
# gymnax with distrax's needs (tfp-nightly, dm-tree, gast, decorator); jax2onnx for the GPU
# tier's ONNX test; ale-py and Stable-Baselines3 for Breakout.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    keras==3.15.1 namex==0.1.0 optree==0.20.0 gymnasium==1.4.0 farama-notifications tensorboardX==2.6.5 \
    rejax==0.1.3 gymnax==0.0.9 distrax tfp-nightly decorator gast dm-tree jax2onnx==0.17.1 \
    ale-py==0.12.1 stable-baselines3==2.9.2
ls .whl
