"""The demo's example model: a small bf16 transformer encoder classifier, trained on random tokens."""
from __future__ import annotations

import torch


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab: int = 100, d_model: int = 64, heads: int = 4, layers: int = 2, classes: int = 5):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        layer = torch.nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d_model, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(tokens))
        return self.head(h.mean(dim=1))


def train_step_dumped(dump_path: str, *, layers: int = 2, batch: int = 4, seq: int = 16,
                      dtype: torch.dtype = torch.bfloat16) -> float:
    """One AdamW training step of the model, dumped (task tensor, level L1). Returns the loss."""
    from pytest_msprobe import PrecisionDebugger

    torch.manual_seed(0)
    model = TinyTransformer(layers=layers).to(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 100, (batch, seq))
    labels = torch.randint(0, 5, (batch,))
    debugger = PrecisionDebugger(task="tensor", dump_path=dump_path, level="L1")
    debugger.start()
    loss = torch.nn.functional.cross_entropy(model(tokens), labels)
    loss.backward()
    optimizer.step()
    debugger.stop()
    debugger.step()
    return float(loss.detach())
