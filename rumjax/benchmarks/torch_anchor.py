"""PyTorch's ``nn.GRU`` and ``nn.LSTM`` (cuDNN on an NVIDIA GPU) as the anchor of the cell
benchmark: what a user would pick instead of RUM. Optional: PyTorch is never a dependency;
the candidates ``torch_gru`` / ``torch_lstm`` exist only where ``import torch`` works.

The step is the benchmark's: forward of the whole sequence (``batch_first``), the loss
``sum(hs ** 2)`` summed in float32, backward w.r.t. the parameters, on the same device kind
as JAX's default backend (CUDA on a GPU machine) and in the same computation dtype
(float32 or bfloat16; PyTorch's parameters then are in that dtype too). A forward step
(``forward=True``) computes the loss under ``torch.no_grad()``, as at inference.
"""

import importlib.util

import jax
import jax.numpy as jnp

KINDS = ("torch_gru", "torch_lstm")


def available() -> bool:
  """Whether PyTorch can be imported here."""
  return importlib.util.find_spec("torch") is not None


def device_name() -> str:
  """The torch device matching JAX's default backend ("cuda" on a GPU, else "cpu")."""
  import torch   # pylint: disable=import-outside-toplevel
  return "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"


def make_step(kind, shape, dtype=jnp.float32, forward=False):
  """``step()``: one training step (``forward``: the loss alone, no gradient) of
  ``torch.nn.GRU`` / ``LSTM`` at ``(B, T, Nx, Nh)``, synchronised (it returns once the
  device is done)."""
  if not available():
    raise ValueError(f"candidate {kind!r} needs PyTorch, which is not importable here.")
  import torch   # pylint: disable=import-outside-toplevel
  tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[jnp.dtype(dtype).name]
  device = device_name()
  b, t, nx, nh = shape
  torch.manual_seed(0)
  cls = torch.nn.GRU if kind == "torch_gru" else torch.nn.LSTM
  rnn = cls(nx, nh, batch_first=True).to(device=device, dtype=tdtype)
  xs = torch.randn(b, t, nx, device=device).to(tdtype)
  sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

  def step():
    rnn.zero_grad(set_to_none=True)
    hs, _ = rnn(xs)
    hs.float().square().sum().backward()
    sync()

  def forward_step():
    with torch.no_grad():
      hs, _ = rnn(xs)
      hs.float().square().sum()
    sync()

  return forward_step if forward else step


def torch_version() -> str:
  """PyTorch's version, CUDA and cuDNN (for the report's first lines)."""
  if not available():
    return "torch: not importable"
  import torch   # pylint: disable=import-outside-toplevel
  cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
  return f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}"
