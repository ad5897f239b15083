"""The recipe's tokenizer: one sentencepiece model for P and N text (``<blk>`` = 0)."""

from typing import List


class Tokenizer:
    """The recipe's sentencepiece model (``<blk>`` = 0)."""

    def __init__(self, bpe_model: str) -> None:
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=str(bpe_model))
        self.blank_id = self.sp.piece_to_id("<blk>")
        if self.blank_id != 0:
            raise ValueError(f"{bpe_model}: <blk> must have id 0 (got {self.blank_id})")
        self.unk_id = self.sp.unk_id()

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    @property
    def pieces(self) -> List[str]:
        """Every piece, by id (what ``tokens.txt`` lists)."""
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]

    def encode(self, text: str) -> List[int]:
        return self.sp.encode(text)

    def decode(self, ids: List[int]) -> str:
        return self.sp.decode([i for i in ids if i != self.blank_id])
