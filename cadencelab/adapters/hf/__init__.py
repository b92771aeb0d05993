"""transformers models as a first-class source for the kit: a bridge from the kit's regions to transformers'
own cache objects (:mod:`.bridge`), and shipped adapters, one module each, every one certified against
transformers' own streaming loop: :mod:`.mimi_encoder`, :mod:`.mimi_decoder` (``MimiModel``) and
:mod:`.qwen2_decode` (a Qwen2 decode step with a growing KV cache: ``DynamicCache``, or ``StaticCache``
through ``kit_model_static_on``). Each module has ``kit_model_on(device)``
(``python -m cadencelab.bench kit --model cadencelab.adapters.hf.mimi_encoder:kit_model_on``).

Importing this package needs HF ``transformers`` (the test extra installs it).
"""
