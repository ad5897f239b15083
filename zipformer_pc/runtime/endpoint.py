"""Endpoint detection for the streaming runtime, in the style of sherpa-onnx.

A stream is cut into segments.  After every chunk the recognizer asks
:meth:`EndpointConfig.detected` whether the current segment has ended; if so
it finalises the segment's P and N text and starts the next one with fresh
hypotheses (the encoder keeps its states: the audio is one continuous
stream).

A *rule* fires when all of its conditions hold:

* ``must_contain_nonsilence``: the segment has emitted at least one token;
* ``min_trailing_silence``: seconds since the last emitted token (or since
  the segment started, when none was emitted) are at least this;
* ``min_utterance_length``: the segment is at least this many seconds long.

The defaults are sherpa-onnx's: rule 1 ends a segment after 2.4 s without
any token, rule 2 after 1.2 s of silence following speech, rule 3 at 20 s
whatever is happening.  "Silence" is what the model says it is: frames on
which no searched mode emitted a token (a mark emitted in P after the last
word counts as activity, so a sentence-final mark lands in its own segment,
before the cut).
"""

from dataclasses import dataclass, field

from zipformer_pc.options import str2bool


@dataclass(frozen=True)
class EndpointRule:
    must_contain_nonsilence: bool
    min_trailing_silence: float  # seconds
    min_utterance_length: float  # seconds

    def __post_init__(self) -> None:
        if self.min_trailing_silence < 0 or self.min_utterance_length < 0:
            raise ValueError(f"endpoint rule with a negative duration: {self}")
        if self.min_trailing_silence == 0 and self.min_utterance_length == 0:
            raise ValueError(f"endpoint rule {self} would end every segment at once")

    def fires(self, segment_seconds: float, trailing_silence: float, has_speech: bool) -> bool:
        return ((has_speech or not self.must_contain_nonsilence)
                and trailing_silence >= self.min_trailing_silence
                and segment_seconds >= self.min_utterance_length)


@dataclass(frozen=True)
class EndpointConfig:
    """The rules (any one ends a segment) and whether endpointing is on."""

    rule1: EndpointRule = field(default_factory=lambda: EndpointRule(False, 2.4, 0.0))
    rule2: EndpointRule = field(default_factory=lambda: EndpointRule(True, 1.2, 0.0))
    rule3: EndpointRule = field(default_factory=lambda: EndpointRule(False, 0.0, 20.0))
    enabled: bool = True

    @classmethod
    def from_options(cls, enabled: bool = True, rule1_min_trailing_silence: float = 2.4,
                     rule2_min_trailing_silence: float = 1.2, rule3_min_utterance_length: float = 20.0
                     ) -> "EndpointConfig":
        """The command-line spelling (sherpa-onnx's option names)."""
        return cls(EndpointRule(False, rule1_min_trailing_silence, 0.0),
                   EndpointRule(True, rule2_min_trailing_silence, 0.0),
                   EndpointRule(False, 0.0, rule3_min_utterance_length), enabled)

    @classmethod
    def from_args(cls, args) -> "EndpointConfig":
        """From the options of :func:`add_endpoint_options`."""
        return cls.from_options(args.endpoint, args.rule1_min_trailing_silence, args.rule2_min_trailing_silence,
                                args.rule3_min_utterance_length)

    def detected(self, segment_frames: int, trailing_blank_frames: int, has_speech: bool,
                 frame_seconds: float) -> bool:
        """Whether a segment of ``segment_frames`` encoder frames, whose last
        ``trailing_blank_frames`` emitted nothing, has ended."""
        if not self.enabled:
            return False
        if not 0 <= trailing_blank_frames <= segment_frames:
            raise ValueError(f"trailing blanks {trailing_blank_frames} outside a segment of {segment_frames} frames")
        length, silence = segment_frames * frame_seconds, trailing_blank_frames * frame_seconds
        return any(r.fires(length, silence, has_speech) for r in (self.rule1, self.rule2, self.rule3))


def add_endpoint_options(parser, enabled: bool, what: str) -> None:
    """``--endpoint`` and sherpa-onnx's three rule options (its defaults), for the
    command lines that cut ``what`` (e.g. "each input") into segments."""
    parser.add_argument("--endpoint", type=str2bool, default=enabled,
                        help=f"cut {what} into segments with endpoint rules (sherpa-onnx's defaults below)")
    parser.add_argument("--rule1-min-trailing-silence", type=float, default=2.4, help="seconds, no speech")
    parser.add_argument("--rule2-min-trailing-silence", type=float, default=1.2, help="seconds, after speech")
    parser.add_argument("--rule3-min-utterance-length", type=float, default=20.0, help="seconds")
