"""Next-token loss for multimodal_transformer: the LM objective with one image per row.

The batch is the LM's (rows of seq_len + 1 token ids, numpy default_rng(0)) with the first
`image_tokens` ids of each row set to the image token id, plus one image per row (float32
pixels in 0-255, mapped to [-1, 1]). Every target is scored, the image positions' included,
through the LM objective's chunked tied head.
"""

from __future__ import annotations

import numpy as np

from dew.train.objectives import register_objective, to_unit_range
from dew.train.objectives.lm import NextTokenPrediction, chunked_cross_entropy


@register_objective("multimodal_lm")
class MultimodalNextTokenPrediction(NextTokenPrediction):
    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        c = self.config
        batch = super().example_batch(batch_size)
        batch["tokens"][:, : c.image_tokens] = c.image_token_id
        rng = np.random.default_rng(1)  # the token rows keep the LM objective's seed-0 draw
        shape = (batch_size, c.image_size, c.image_size, 3)
        batch["images"] = rng.uniform(0, 255, shape).astype(np.float32)
        return batch

    def loss(self, model, batch, rng, *, condition=None, ema=None):
        tokens = batch["tokens"]
        hidden = model(tokens[:, :-1], to_unit_range(batch["images"]))
        loss = chunked_cross_entropy(
            hidden, model.head_table(), tokens[:, 1:], self.config.head_chunks
        )
        return loss, {}
