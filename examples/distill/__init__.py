"""On-policy distillation recipe: a student answers short writing prompts, a teacher scores its tokens."""
