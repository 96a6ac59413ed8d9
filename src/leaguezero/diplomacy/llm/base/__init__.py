"""Building a base and teaching it the format: ``llm pretrain`` (a Llama-shaped model and tokenizer
trained here) and ``llm imitate`` (a LoRA adapter trained on a teacher's orders).
"""
