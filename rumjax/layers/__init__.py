"""Attention layers as Flax modules, one idea per file (import the module you need):

* ``starsaber``: the StarSaber layer (fixed-point self-attention turned from an RNN) and its
  variants, on top of the functional :mod:`rumjax.core.starsaber`;
* ``transformer``: post-LN Transformer and ReZero encoder layers;
* ``positional``: sinusoidal position encodings;
* ``dense``: ``Dense``, Flax's with its bias added in float32 (the precision policy).
"""
