"""HotpotQA-style multi-hop question answering with a BM25 search tool over the shipped paragraphs."""
