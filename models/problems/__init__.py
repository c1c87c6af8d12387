"""What a problem is: the attention models and their losses, gradients and fields.

``attention`` (the prompt-attention model reduced to keys and scores, ``PromptProblem``),
``losses`` (ℓ and its log-space pieces), ``cross`` (cross-attention with a trained key-query
matrix), ``embedding`` (trained token embeddings, 2505.17282), ``heads`` (the nonlinear head
on p, Theorem NL) and ``nonlinear_head`` (cross-attention with a nonlinear head and its SVM
equivalence).

A module belongs here when it defines an objective: the data of an instance, the loss on it
and its exact gradient. How training moves on that objective lives in ``models.flows``, the
max-margin problems it is compared with in ``models.oracles``. Import modules by full name;
this file imports nothing.
"""
