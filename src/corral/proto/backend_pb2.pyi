from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EmbeddingLayout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBEDDING_LAYOUT_UNSPECIFIED: _ClassVar[EmbeddingLayout]
    EMBEDDING_LAYOUT_FINAL: _ClassVar[EmbeddingLayout]
    EMBEDDING_LAYOUT_PER_TOKEN: _ClassVar[EmbeddingLayout]
EMBEDDING_LAYOUT_UNSPECIFIED: EmbeddingLayout
EMBEDDING_LAYOUT_FINAL: EmbeddingLayout
EMBEDDING_LAYOUT_PER_TOKEN: EmbeddingLayout

class HealthMessage(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("query", "documents", "top_n", "ModelIdentity")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    MODELIDENTITY_FIELD_NUMBER: _ClassVar[int]
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    top_n: int
    ModelIdentity: str
    def __init__(self, query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ..., top_n: _Optional[int] = ..., ModelIdentity: _Optional[str] = ...) -> None: ...

class TranscriptRequest(_message.Message):
    __slots__ = ("dst", "language", "threads", "translate", "diarize", "prompt", "temperature", "ModelIdentity")
    DST_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    TRANSLATE_FIELD_NUMBER: _ClassVar[int]
    DIARIZE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MODELIDENTITY_FIELD_NUMBER: _ClassVar[int]
    dst: str
    language: str
    threads: int
    translate: bool
    diarize: bool
    prompt: str
    temperature: float
    ModelIdentity: str
    def __init__(self, dst: _Optional[str] = ..., language: _Optional[str] = ..., threads: _Optional[int] = ..., translate: _Optional[bool] = ..., diarize: _Optional[bool] = ..., prompt: _Optional[str] = ..., temperature: _Optional[float] = ..., ModelIdentity: _Optional[str] = ...) -> None: ...

class TranscriptSegment(_message.Message):
    __slots__ = ("id", "start", "end", "text", "tokens")
    ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    id: int
    start: int
    end: int
    text: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[int] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., text: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class TranscriptResult(_message.Message):
    __slots__ = ("segments", "text", "language", "duration")
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[TranscriptSegment]
    text: str
    language: str
    duration: float
    def __init__(self, segments: _Optional[_Iterable[_Union[TranscriptSegment, _Mapping]]] = ..., text: _Optional[str] = ..., language: _Optional[str] = ..., duration: _Optional[float] = ...) -> None: ...

class GenerateImageRequest(_message.Message):
    __slots__ = ("height", "width", "step", "seed", "positive_prompt", "negative_prompt", "dst", "src", "ModelIdentity")
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    POSITIVE_PROMPT_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_PROMPT_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    MODELIDENTITY_FIELD_NUMBER: _ClassVar[int]
    height: int
    width: int
    step: int
    seed: int
    positive_prompt: str
    negative_prompt: str
    dst: str
    src: str
    ModelIdentity: str
    def __init__(self, height: _Optional[int] = ..., width: _Optional[int] = ..., step: _Optional[int] = ..., seed: _Optional[int] = ..., positive_prompt: _Optional[str] = ..., negative_prompt: _Optional[str] = ..., dst: _Optional[str] = ..., src: _Optional[str] = ..., ModelIdentity: _Optional[str] = ...) -> None: ...

class TTSRequest(_message.Message):
    __slots__ = ("text", "model", "dst", "voice", "language", "speed", "ModelIdentity")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    MODELIDENTITY_FIELD_NUMBER: _ClassVar[int]
    text: str
    model: str
    dst: str
    voice: str
    language: str
    speed: float
    ModelIdentity: str
    def __init__(self, text: _Optional[str] = ..., model: _Optional[str] = ..., dst: _Optional[str] = ..., voice: _Optional[str] = ..., language: _Optional[str] = ..., speed: _Optional[float] = ..., ModelIdentity: _Optional[str] = ...) -> None: ...

class RerankResult(_message.Message):
    __slots__ = ("usage", "results")
    USAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    usage: Usage
    results: _containers.RepeatedCompositeFieldContainer[DocumentResult]
    def __init__(self, usage: _Optional[_Union[Usage, _Mapping]] = ..., results: _Optional[_Iterable[_Union[DocumentResult, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("total_tokens", "prompt_tokens")
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    total_tokens: int
    prompt_tokens: int
    def __init__(self, total_tokens: _Optional[int] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class DocumentResult(_message.Message):
    __slots__ = ("index", "text", "relevance_score")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    relevance_score: float
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., relevance_score: _Optional[float] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("message", "success")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    message: str
    success: bool
    def __init__(self, message: _Optional[str] = ..., success: _Optional[bool] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ChatDelta(_message.Message):
    __slots__ = ("content", "reasoning_content", "tool_calls")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    content: str
    reasoning_content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallDelta]
    def __init__(self, content: _Optional[str] = ..., reasoning_content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallDelta, _Mapping]]] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ("message", "tokens", "prompt_tokens", "timing_prompt_processing", "timing_token_generation", "audio", "logprobs", "chat_deltas")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIMING_PROMPT_PROCESSING_FIELD_NUMBER: _ClassVar[int]
    TIMING_TOKEN_GENERATION_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    CHAT_DELTAS_FIELD_NUMBER: _ClassVar[int]
    message: bytes
    tokens: int
    prompt_tokens: int
    timing_prompt_processing: float
    timing_token_generation: float
    audio: bytes
    logprobs: bytes
    chat_deltas: _containers.RepeatedCompositeFieldContainer[ChatDelta]
    def __init__(self, message: _Optional[bytes] = ..., tokens: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., timing_prompt_processing: _Optional[float] = ..., timing_token_generation: _Optional[float] = ..., audio: _Optional[bytes] = ..., logprobs: _Optional[bytes] = ..., chat_deltas: _Optional[_Iterable[_Union[ChatDelta, _Mapping]]] = ...) -> None: ...

class EmbeddingResult(_message.Message):
    __slots__ = ("embeddings", "tokens", "dim", "prompt_tokens", "layout")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedScalarFieldContainer[float]
    tokens: int
    dim: int
    prompt_tokens: int
    layout: EmbeddingLayout
    def __init__(self, embeddings: _Optional[_Iterable[float]] = ..., tokens: _Optional[int] = ..., dim: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., layout: _Optional[_Union[EmbeddingLayout, str]] = ...) -> None: ...

class TokenizationResponse(_message.Message):
    __slots__ = ("length", "tokens")
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    length: int
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, length: _Optional[int] = ..., tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class MemoryUsageData(_message.Message):
    __slots__ = ("total", "breakdown")
    class BreakdownEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    total: int
    breakdown: _containers.ScalarMap[str, int]
    def __init__(self, total: _Optional[int] = ..., breakdown: _Optional[_Mapping[str, int]] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("state", "memory", "corral_fast_lane_port", "corral_in_flight", "corral_replies_produced")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNINITIALIZED: _ClassVar[StatusResponse.State]
        BUSY: _ClassVar[StatusResponse.State]
        READY: _ClassVar[StatusResponse.State]
        ERROR: _ClassVar[StatusResponse.State]
    UNINITIALIZED: StatusResponse.State
    BUSY: StatusResponse.State
    READY: StatusResponse.State
    ERROR: StatusResponse.State
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    CORRAL_FAST_LANE_PORT_FIELD_NUMBER: _ClassVar[int]
    CORRAL_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CORRAL_REPLIES_PRODUCED_FIELD_NUMBER: _ClassVar[int]
    state: StatusResponse.State
    memory: MemoryUsageData
    corral_fast_lane_port: int
    corral_in_flight: int
    corral_replies_produced: int
    def __init__(self, state: _Optional[_Union[StatusResponse.State, str]] = ..., memory: _Optional[_Union[MemoryUsageData, _Mapping]] = ..., corral_fast_lane_port: _Optional[int] = ..., corral_in_flight: _Optional[int] = ..., corral_replies_produced: _Optional[int] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content", "name", "tool_call_id", "reasoning_content", "tool_calls")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    tool_call_id: str
    reasoning_content: str
    tool_calls: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., reasoning_content: _Optional[str] = ..., tool_calls: _Optional[str] = ...) -> None: ...

class PredictOptions(_message.Message):
    __slots__ = ("Prompt", "Seed", "Threads", "Tokens", "TopK", "Repeat", "Batch", "NKeep", "Temperature", "Penalty", "StopPrompts", "IgnoreEOS", "FrequencyPenalty", "PresencePenalty", "LogitBias", "Grammar", "TopP", "EmbeddingTokens", "Embeddings", "Images", "UseTokenizerTemplate", "Messages", "Videos", "Audios", "CorrelationId", "Tools", "ToolChoice", "Logprobs", "TopLogprobs", "Metadata", "MinP", "ModelIdentity")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOPK_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NKEEP_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    PENALTY_FIELD_NUMBER: _ClassVar[int]
    STOPPROMPTS_FIELD_NUMBER: _ClassVar[int]
    IGNOREEOS_FIELD_NUMBER: _ClassVar[int]
    FREQUENCYPENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCEPENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGITBIAS_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    TOPP_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGTOKENS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    USETOKENIZERTEMPLATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VIDEOS_FIELD_NUMBER: _ClassVar[int]
    AUDIOS_FIELD_NUMBER: _ClassVar[int]
    CORRELATIONID_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOLCHOICE_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOPLOGPROBS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MINP_FIELD_NUMBER: _ClassVar[int]
    MODELIDENTITY_FIELD_NUMBER: _ClassVar[int]
    Prompt: str
    Seed: int
    Threads: int
    Tokens: int
    TopK: int
    Repeat: int
    Batch: int
    NKeep: int
    Temperature: float
    Penalty: float
    StopPrompts: _containers.RepeatedScalarFieldContainer[str]
    IgnoreEOS: bool
    FrequencyPenalty: float
    PresencePenalty: float
    LogitBias: str
    Grammar: str
    TopP: float
    EmbeddingTokens: _containers.RepeatedScalarFieldContainer[int]
    Embeddings: str
    Images: _containers.RepeatedScalarFieldContainer[str]
    UseTokenizerTemplate: bool
    Messages: _containers.RepeatedCompositeFieldContainer[Message]
    Videos: _containers.RepeatedScalarFieldContainer[str]
    Audios: _containers.RepeatedScalarFieldContainer[str]
    CorrelationId: str
    Tools: str
    ToolChoice: str
    Logprobs: int
    TopLogprobs: int
    Metadata: _containers.ScalarMap[str, str]
    MinP: float
    ModelIdentity: str
    def __init__(self, Prompt: _Optional[str] = ..., Seed: _Optional[int] = ..., Threads: _Optional[int] = ..., Tokens: _Optional[int] = ..., TopK: _Optional[int] = ..., Repeat: _Optional[int] = ..., Batch: _Optional[int] = ..., NKeep: _Optional[int] = ..., Temperature: _Optional[float] = ..., Penalty: _Optional[float] = ..., StopPrompts: _Optional[_Iterable[str]] = ..., IgnoreEOS: _Optional[bool] = ..., FrequencyPenalty: _Optional[float] = ..., PresencePenalty: _Optional[float] = ..., LogitBias: _Optional[str] = ..., Grammar: _Optional[str] = ..., TopP: _Optional[float] = ..., EmbeddingTokens: _Optional[_Iterable[int]] = ..., Embeddings: _Optional[str] = ..., Images: _Optional[_Iterable[str]] = ..., UseTokenizerTemplate: _Optional[bool] = ..., Messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., Videos: _Optional[_Iterable[str]] = ..., Audios: _Optional[_Iterable[str]] = ..., CorrelationId: _Optional[str] = ..., Tools: _Optional[str] = ..., ToolChoice: _Optional[str] = ..., Logprobs: _Optional[int] = ..., TopLogprobs: _Optional[int] = ..., Metadata: _Optional[_Mapping[str, str]] = ..., MinP: _Optional[float] = ..., ModelIdentity: _Optional[str] = ...) -> None: ...

class ModelOptions(_message.Message):
    __slots__ = ("Model", "ContextSize", "Seed", "NBatch", "F16Memory", "MLock", "MMap", "VocabOnly", "LowVRAM", "Embeddings", "NUMA", "NGPULayers", "MainGPU", "TensorSplit", "Threads", "RopeFreqBase", "RopeFreqScale", "RMSNormEps", "NGQA", "ModelFile", "CLIPModel", "Tokenizer", "LoraBase", "LoraAdapter", "AudioPath", "DraftModel", "MMProj", "LoraScale", "Type", "FlashAttention", "ModelPath", "LoraAdapters", "LoraScales", "Options", "CacheTypeKey", "CacheTypeValue", "Reranking", "Overrides")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTEXTSIZE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    NBATCH_FIELD_NUMBER: _ClassVar[int]
    F16MEMORY_FIELD_NUMBER: _ClassVar[int]
    MLOCK_FIELD_NUMBER: _ClassVar[int]
    MMAP_FIELD_NUMBER: _ClassVar[int]
    VOCABONLY_FIELD_NUMBER: _ClassVar[int]
    LOWVRAM_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    NUMA_FIELD_NUMBER: _ClassVar[int]
    NGPULAYERS_FIELD_NUMBER: _ClassVar[int]
    MAINGPU_FIELD_NUMBER: _ClassVar[int]
    TENSORSPLIT_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    ROPEFREQBASE_FIELD_NUMBER: _ClassVar[int]
    ROPEFREQSCALE_FIELD_NUMBER: _ClassVar[int]
    RMSNORMEPS_FIELD_NUMBER: _ClassVar[int]
    NGQA_FIELD_NUMBER: _ClassVar[int]
    MODELFILE_FIELD_NUMBER: _ClassVar[int]
    CLIPMODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    LORABASE_FIELD_NUMBER: _ClassVar[int]
    LORAADAPTER_FIELD_NUMBER: _ClassVar[int]
    AUDIOPATH_FIELD_NUMBER: _ClassVar[int]
    DRAFTMODEL_FIELD_NUMBER: _ClassVar[int]
    MMPROJ_FIELD_NUMBER: _ClassVar[int]
    LORASCALE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FLASHATTENTION_FIELD_NUMBER: _ClassVar[int]
    MODELPATH_FIELD_NUMBER: _ClassVar[int]
    LORAADAPTERS_FIELD_NUMBER: _ClassVar[int]
    LORASCALES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CACHETYPEKEY_FIELD_NUMBER: _ClassVar[int]
    CACHETYPEVALUE_FIELD_NUMBER: _ClassVar[int]
    RERANKING_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    Model: str
    ContextSize: int
    Seed: int
    NBatch: int
    F16Memory: bool
    MLock: bool
    MMap: bool
    VocabOnly: bool
    LowVRAM: bool
    Embeddings: bool
    NUMA: bool
    NGPULayers: int
    MainGPU: str
    TensorSplit: str
    Threads: int
    RopeFreqBase: float
    RopeFreqScale: float
    RMSNormEps: float
    NGQA: int
    ModelFile: str
    CLIPModel: str
    Tokenizer: str
    LoraBase: str
    LoraAdapter: str
    AudioPath: str
    DraftModel: str
    MMProj: str
    LoraScale: float
    Type: str
    FlashAttention: str
    ModelPath: str
    LoraAdapters: _containers.RepeatedScalarFieldContainer[str]
    LoraScales: _containers.RepeatedScalarFieldContainer[float]
    Options: _containers.RepeatedScalarFieldContainer[str]
    CacheTypeKey: str
    CacheTypeValue: str
    Reranking: bool
    Overrides: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, Model: _Optional[str] = ..., ContextSize: _Optional[int] = ..., Seed: _Optional[int] = ..., NBatch: _Optional[int] = ..., F16Memory: _Optional[bool] = ..., MLock: _Optional[bool] = ..., MMap: _Optional[bool] = ..., VocabOnly: _Optional[bool] = ..., LowVRAM: _Optional[bool] = ..., Embeddings: _Optional[bool] = ..., NUMA: _Optional[bool] = ..., NGPULayers: _Optional[int] = ..., MainGPU: _Optional[str] = ..., TensorSplit: _Optional[str] = ..., Threads: _Optional[int] = ..., RopeFreqBase: _Optional[float] = ..., RopeFreqScale: _Optional[float] = ..., RMSNormEps: _Optional[float] = ..., NGQA: _Optional[int] = ..., ModelFile: _Optional[str] = ..., CLIPModel: _Optional[str] = ..., Tokenizer: _Optional[str] = ..., LoraBase: _Optional[str] = ..., LoraAdapter: _Optional[str] = ..., AudioPath: _Optional[str] = ..., DraftModel: _Optional[str] = ..., MMProj: _Optional[str] = ..., LoraScale: _Optional[float] = ..., Type: _Optional[str] = ..., FlashAttention: _Optional[str] = ..., ModelPath: _Optional[str] = ..., LoraAdapters: _Optional[_Iterable[str]] = ..., LoraScales: _Optional[_Iterable[float]] = ..., Options: _Optional[_Iterable[str]] = ..., CacheTypeKey: _Optional[str] = ..., CacheTypeValue: _Optional[str] = ..., Reranking: _Optional[bool] = ..., Overrides: _Optional[_Iterable[str]] = ...) -> None: ...
