"""MindSpore API names and the PyTorch APIs they correspond to, for ``compare -am`` (data: the correspondence
msprobe 26.2 ships, written here as two tables).

``mindspore.ops.X`` (dumped as ``Functional.X``) that is ``torch.X`` (``Torch.X``) for every name in
:data:`FUNCTIONAL_TO_TORCH`; the names in :data:`RENAMED` change as shown. The other ``Functional.*`` and
``Tensor.*`` names of the table keep their name on the PyTorch side, so they need no entry. ``Mint.*`` is
``Torch.*`` and ``MintFunctional.*`` is ``Functional.*`` by rule (``mindspore.mint`` copies torch's layout).
"""
from __future__ import annotations

FUNCTIONAL_TO_TORCH = frozenset((
    "abs absolute acos acosh add addbmm addcdiv addcmul addmm addmv angle arange arccos arccosh arcsinh arctan "
    "arctanh argmax asin asinh atan atan2 atanh baddbmm bartlett_window bincount bitwise_and bitwise_or "
    "bitwise_xor blackman_window ceil cholesky_solve clamp clip column_stack conj cosh cross cumprod diag_embed "
    "diagflat diagonal digamma dist div divide einsum erf erfc exp exp2 expm1 eye flip fliplr flipud floor_divide "
    "fmax fmod full full_like gcd geqrf greater greater_equal hamming_window hann_window heaviside histc hsplit "
    "hstack hypot i0 igamma igammac imag inner inverse is_nonzero is_tensor isinf isneginf isposinf isreal "
    "kaiser_window kron lcm lerp log1p logaddexp logaddexp2 logdet logical_and logical_not logical_or logical_xor "
    "logit logspace lt lu_solve lu_unpack masked_select matmul mm moveaxis movedim msort mul multiply nan_to_num "
    "nansum neg negative nextafter nonzero not_equal numel ones_like orgqr outer permute polar pow rand rand_like "
    "randn randn_like ravel real reciprocal remainder reshape roll rot90 round row_stack rsqrt searchsorted sgn "
    "sign signbit sin sinc sinh slogdet square subtract sum swapdims t tan topk trace trapz tril tril_indices "
    "triu_indices true_divide trunc unbind unsqueeze vander view_as_real vsplit where xlogy zeros_like "
).split())

RENAMED = {
    "Functional.bidense": "Functional.bilinear",
    "Functional.dense": "Functional.linear",
    "Functional.equal": "Torch.eq",
    "Functional.swapaxes": "Torch.transpose",
    "Tensor.asnumpy": "Tensor.numpy",
    "Tensor.cauchy": "Tensor.cauchy_",
    "Tensor.equal": "Tensor.eq",
    "Tensor.fill_diagonal": "Tensor.fill_diagonal_",
    "Tensor.gather_elements": "Tensor.gather",
    "Tensor.swapaxes": "Tensor.transpose",
}


def torch_api(ms_api: str) -> str | None:
    """The PyTorch API name of a MindSpore one (``Functional.dense`` -> ``Functional.linear``), or None."""
    if ms_api in RENAMED:
        return RENAMED[ms_api]
    prefix, _, name = ms_api.partition(".")
    if prefix == "Functional" and name in FUNCTIONAL_TO_TORCH:
        return "Torch." + name
    return None
