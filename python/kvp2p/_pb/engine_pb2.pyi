from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApiVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    API_VERSION_UNSPECIFIED: _ClassVar[ApiVersion]
    API_VERSION_1: _ClassVar[ApiVersion]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_HIT: _ClassVar[Verdict]
    VERDICT_MISS: _ClassVar[Verdict]
    VERDICT_RETRY: _ClassVar[Verdict]

class JobKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_KIND_UNSPECIFIED: _ClassVar[JobKind]
    JOB_KIND_LOAD: _ClassVar[JobKind]
    JOB_KIND_STORE: _ClassVar[JobKind]
API_VERSION_UNSPECIFIED: ApiVersion
API_VERSION_1: ApiVersion
VERDICT_UNSPECIFIED: Verdict
VERDICT_HIT: Verdict
VERDICT_MISS: Verdict
VERDICT_RETRY: Verdict
JOB_KIND_UNSPECIFIED: JobKind
JOB_KIND_LOAD: JobKind
JOB_KIND_STORE: JobKind

class WatchSummariesRequest(_message.Message):
    __slots__ = ("registration",)
    REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    registration: int
    def __init__(self, registration: _Optional[int] = ...) -> None: ...

class SummaryUpdate(_message.Message):
    __slots__ = ("peer", "gone", "format", "reset", "last", "epoch", "seq", "size", "words_packed")
    PEER_FIELD_NUMBER: _ClassVar[int]
    GONE_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    WORDS_PACKED_FIELD_NUMBER: _ClassVar[int]
    peer: str
    gone: bool
    format: int
    reset: bool
    last: bool
    epoch: int
    seq: int
    size: int
    words_packed: bytes
    def __init__(self, peer: _Optional[str] = ..., gone: _Optional[bool] = ..., format: _Optional[int] = ..., reset: _Optional[bool] = ..., last: _Optional[bool] = ..., epoch: _Optional[int] = ..., seq: _Optional[int] = ..., size: _Optional[int] = ..., words_packed: _Optional[bytes] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("api_version", "engine_id", "region_path", "num_chunks", "row_stride", "fingerprint", "hash_seed")
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_PATH_FIELD_NUMBER: _ClassVar[int]
    NUM_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ROW_STRIDE_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    HASH_SEED_FIELD_NUMBER: _ClassVar[int]
    api_version: ApiVersion
    engine_id: str
    region_path: str
    num_chunks: int
    row_stride: int
    fingerprint: bytes
    hash_seed: str
    def __init__(self, api_version: _Optional[_Union[ApiVersion, str]] = ..., engine_id: _Optional[str] = ..., region_path: _Optional[str] = ..., num_chunks: _Optional[int] = ..., row_stride: _Optional[int] = ..., fingerprint: _Optional[bytes] = ..., hash_seed: _Optional[str] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("registration", "api_version", "peer_id", "failure_domain", "max_keys_per_step", "max_jobs_in_flight", "step_socket")
    REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURE_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    MAX_KEYS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    STEP_SOCKET_FIELD_NUMBER: _ClassVar[int]
    registration: int
    api_version: ApiVersion
    peer_id: str
    failure_domain: str
    max_keys_per_step: int
    max_jobs_in_flight: int
    step_socket: str
    def __init__(self, registration: _Optional[int] = ..., api_version: _Optional[_Union[ApiVersion, str]] = ..., peer_id: _Optional[str] = ..., failure_domain: _Optional[str] = ..., max_keys_per_step: _Optional[int] = ..., max_jobs_in_flight: _Optional[int] = ..., step_socket: _Optional[str] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class EngineMessage(_message.Message):
    __slots__ = ("register", "grant", "ping")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    register: Register
    grant: ServeGrant
    ping: Ping
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., grant: _Optional[_Union[ServeGrant, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ...) -> None: ...

class SidecarMessage(_message.Message):
    __slots__ = ("registered", "ask", "release", "ping")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    ASK_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    ask: ServeAsk
    release: ServeRelease
    ping: Ping
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., ask: _Optional[_Union[ServeAsk, _Mapping]] = ..., release: _Optional[_Union[ServeRelease, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ...) -> None: ...

class ServeAsk(_message.Message):
    __slots__ = ("ask_id", "keys")
    ASK_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ask_id: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, ask_id: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ServeGrant(_message.Message):
    __slots__ = ("ask_id", "pin_id", "keys", "chunk_ids")
    ASK_ID_FIELD_NUMBER: _ClassVar[int]
    PIN_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    ask_id: int
    pin_id: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    chunk_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ask_id: _Optional[int] = ..., pin_id: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ..., chunk_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ServeRelease(_message.Message):
    __slots__ = ("pin_ids",)
    PIN_IDS_FIELD_NUMBER: _ClassVar[int]
    pin_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pin_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Remote(_message.Message):
    __slots__ = ("host", "port", "domain", "kv_request_id")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    KV_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    domain: str
    kv_request_id: str
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., domain: _Optional[str] = ..., kv_request_id: _Optional[str] = ...) -> None: ...

class TransferParams(_message.Message):
    __slots__ = ("remote_prefiller", "remote_decoder", "remote_kv_source", "kv_request_id")
    REMOTE_PREFILLER_FIELD_NUMBER: _ClassVar[int]
    REMOTE_DECODER_FIELD_NUMBER: _ClassVar[int]
    REMOTE_KV_SOURCE_FIELD_NUMBER: _ClassVar[int]
    KV_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    remote_prefiller: Remote
    remote_decoder: Remote
    remote_kv_source: Remote
    kv_request_id: str
    def __init__(self, remote_prefiller: _Optional[_Union[Remote, _Mapping]] = ..., remote_decoder: _Optional[_Union[Remote, _Mapping]] = ..., remote_kv_source: _Optional[_Union[Remote, _Mapping]] = ..., kv_request_id: _Optional[str] = ...) -> None: ...

class NewRequest(_message.Message):
    __slots__ = ("req_id", "params")
    REQ_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    req_id: str
    params: TransferParams
    def __init__(self, req_id: _Optional[str] = ..., params: _Optional[_Union[TransferParams, _Mapping]] = ...) -> None: ...

class LookupBatch(_message.Message):
    __slots__ = ("req_id", "keys", "keys_packed", "packed_verdicts")
    REQ_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    KEYS_PACKED_FIELD_NUMBER: _ClassVar[int]
    PACKED_VERDICTS_FIELD_NUMBER: _ClassVar[int]
    req_id: str
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    keys_packed: bytes
    packed_verdicts: bool
    def __init__(self, req_id: _Optional[str] = ..., keys: _Optional[_Iterable[bytes]] = ..., keys_packed: _Optional[bytes] = ..., packed_verdicts: _Optional[bool] = ...) -> None: ...

class LookupAnswer(_message.Message):
    __slots__ = ("req_id", "verdicts", "verdicts_packed")
    REQ_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICTS_FIELD_NUMBER: _ClassVar[int]
    VERDICTS_PACKED_FIELD_NUMBER: _ClassVar[int]
    req_id: str
    verdicts: _containers.RepeatedScalarFieldContainer[Verdict]
    verdicts_packed: bytes
    def __init__(self, req_id: _Optional[str] = ..., verdicts: _Optional[_Iterable[_Union[Verdict, str]]] = ..., verdicts_packed: _Optional[bytes] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "req_id", "keys", "chunk_ids", "keys_packed")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REQ_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    KEYS_PACKED_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    req_id: str
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    chunk_ids: _containers.RepeatedScalarFieldContainer[int]
    keys_packed: bytes
    def __init__(self, job_id: _Optional[int] = ..., req_id: _Optional[str] = ..., keys: _Optional[_Iterable[bytes]] = ..., chunk_ids: _Optional[_Iterable[int]] = ..., keys_packed: _Optional[bytes] = ...) -> None: ...

class JobDone(_message.Message):
    __slots__ = ("job_id", "kind", "success", "successful", "reason", "bytes", "transfer_us")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSFUL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_US_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    kind: JobKind
    success: bool
    successful: _containers.RepeatedScalarFieldContainer[int]
    reason: str
    bytes: int
    transfer_us: int
    def __init__(self, job_id: _Optional[int] = ..., kind: _Optional[_Union[JobKind, str]] = ..., success: _Optional[bool] = ..., successful: _Optional[_Iterable[int]] = ..., reason: _Optional[str] = ..., bytes: _Optional[int] = ..., transfer_us: _Optional[int] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("registration", "new_requests", "lookups", "loads", "stores", "finished", "end_step", "preempted", "stored")
    REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    NEW_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    LOOKUPS_FIELD_NUMBER: _ClassVar[int]
    LOADS_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    END_STEP_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    registration: int
    new_requests: _containers.RepeatedCompositeFieldContainer[NewRequest]
    lookups: _containers.RepeatedCompositeFieldContainer[LookupBatch]
    loads: _containers.RepeatedCompositeFieldContainer[Job]
    stores: _containers.RepeatedCompositeFieldContainer[Job]
    finished: _containers.RepeatedScalarFieldContainer[str]
    end_step: bool
    preempted: _containers.RepeatedScalarFieldContainer[str]
    stored: StoredBlocks
    def __init__(self, registration: _Optional[int] = ..., new_requests: _Optional[_Iterable[_Union[NewRequest, _Mapping]]] = ..., lookups: _Optional[_Iterable[_Union[LookupBatch, _Mapping]]] = ..., loads: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., stores: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., finished: _Optional[_Iterable[str]] = ..., end_step: _Optional[bool] = ..., preempted: _Optional[_Iterable[str]] = ..., stored: _Optional[_Union[StoredBlocks, _Mapping]] = ...) -> None: ...

class StoredBlocks(_message.Message):
    __slots__ = ("keys_packed", "chunk_ids", "removed_chunks")
    KEYS_PACKED_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    keys_packed: bytes
    chunk_ids: _containers.RepeatedScalarFieldContainer[int]
    removed_chunks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keys_packed: _Optional[bytes] = ..., chunk_ids: _Optional[_Iterable[int]] = ..., removed_chunks: _Optional[_Iterable[int]] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("lookups", "finished", "failed_requests", "pending_work")
    LOOKUPS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FAILED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_WORK_FIELD_NUMBER: _ClassVar[int]
    lookups: _containers.RepeatedCompositeFieldContainer[LookupAnswer]
    finished: _containers.RepeatedCompositeFieldContainer[JobDone]
    failed_requests: _containers.RepeatedScalarFieldContainer[str]
    pending_work: bool
    def __init__(self, lookups: _Optional[_Iterable[_Union[LookupAnswer, _Mapping]]] = ..., finished: _Optional[_Iterable[_Union[JobDone, _Mapping]]] = ..., failed_requests: _Optional[_Iterable[str]] = ..., pending_work: _Optional[bool] = ...) -> None: ...
