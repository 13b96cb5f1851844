"""export: a prepared split as the token files other trainers read (Megatron-LM's indexed dataset,
nanoGPT's and llm.c's flat binaries, datatrove's `.ds`), streamed shard by shard."""
