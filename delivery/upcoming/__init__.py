"""What is coming: who will be greeted, where, when and in which words; and each destination's calendar feed."""
