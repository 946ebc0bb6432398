"""One engine model of a continuous-batching LLM server: the model's facts, the weight and KV
formats, prefix caching and the step-time rule that the memory fit, the configuration search,
the capacity prediction and the floors all read (../shared/ARCHITECTURE.md, "One engine model").
"""
