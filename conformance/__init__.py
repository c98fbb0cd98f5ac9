"""The conformance suite against vLLM itself (issue 22): see VLLM-SCHEDULER.md."""
