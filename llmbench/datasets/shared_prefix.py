"""`shared-prefix`: groups of prompts sharing one long system prompt (SGLang's generated-shared-prefix)."""

from __future__ import annotations

import numpy as np

from llmbench.datasets import DatasetInfo, Request
from llmbench.datasets.text import special_count, text_of_length


def build(tokenizer, num_requests: int, seed: int = 0, num_groups: int = 64, prompts_per_group: int = 16,
          system_prompt_len: int = 2048, question_len: int = 128, output_len: int = 256
          ) -> tuple[list[Request], DatasetInfo]:
    """SGLang's defaults: 64 groups x 16 prompts, 2048-token system prompt, 128-token question, 256 out.
    `num_requests` caps the total; groups are interleaved so arrivals mix them."""
    rng = np.random.default_rng(seed)
    systems = [text_of_length(tokenizer, system_prompt_len, int(rng.integers(2**31))) for _ in range(num_groups)]
    requests = []
    for j in range(prompts_per_group):
        for g in range(num_groups):
            question = text_of_length(tokenizer, question_len, int(rng.integers(2**31)))
            prompt = systems[g] + "\n\n" + question
            length = system_prompt_len + question_len - special_count(tokenizer)
            requests.append(Request(prompt, length, output_len, conversation_id=f"group-{g}", turn=j))
    requests = requests[:num_requests] if num_requests else requests
    info = DatasetInfo("shared-prefix", f"generated shared prefix: {num_groups} groups x {prompts_per_group}, "
                       f"system {system_prompt_len} + question {question_len} tokens, output {output_len}",
                       {"num_groups": num_groups, "prompts_per_group": prompts_per_group,
                        "system_prompt_len": system_prompt_len, "question_len": question_len,
                        "output_len": output_len})
    return requests, info
