"""Resources of the ODF v0.39 resource framework (RFC-018, "IaC") and their YAML, as kamu writes it.

Spec v0.39.0 describes configuration as Kubernetes-like *resources*: a ``$schema`` type URI, a
``headers`` block (identity, owner, labels), a ``spec`` (desired state) and, in the canonical
form only, a ``status``. Two representations exist (open-data-fabric ``schemas/resource/``):

* :class:`ResourceInput` is what a user writes: ``headers`` may omit the ``id`` and the owner,
  and several values have a *short form* (a string standing for a struct);
* :class:`Resource` is the canonical form a node stores: every header is resolved and a
  ``status`` is present. :meth:`Resource.to_input` maps it back to an input, as kamu does.

None of this is metadata-chain content (no block carries a resource), so the module is
independent of the FlatBuffers schema. It models what kamu-cli HEAD's YAML cases exercise
(``src/odf/metadata/tests/tests/test_serde_yaml.rs``, the ``test_serde_resource_*`` cases) and
reads and writes them as kamu's ``serde`` derivations do (``src/odf/metadata/src/serde/yaml/
derivations_generated.rs``, ``formats.rs``; ``src/odf/metadata/src/dtos/dtos_extra.rs`` for the
short forms; ``src/odf/metadata/src/formats/grammar.rs`` for names):

* struct fields are camelCase, in declaration order, absent optionals omitted, unknown or
  duplicate fields rejected; an optional field given as ``null`` is absent;
* the ``spec`` type is a parameter (a :class:`SpecCodec`): a typed spec, any JSON value
  (:data:`JSON_SPEC`), or :data:`IGNORED_SPEC` to read the headers only;
* *short forms* (``StructOrString``), read only, kamu always writes the struct:
  an :class:`AccountRef` may be an account name (``account: alice``); a :class:`ResourceRef`
  may be ``Type:name`` or ``Type:account/name`` (``Dataset:bob/bobs-dataset``); a
  :class:`Secret` or :class:`Variable` may be its bare value (``tls: <cert>``);
* maps (secrets, variables, labels, annotations, conditions) are written sorted by key as a Rust
  ``BTreeMap`` orders them. Label, annotation and condition keys are type references
  (:data:`TypeRef`): full type URIs (``https:…``) sort before short type names, and names
  compare case-insensitively. Their values are any JSON value, written with object keys sorted
  (kamu's ``serde_json`` keeps objects in a ``BTreeMap``);
* timestamps are RFC 3339, written with ``Z`` and 0/3/6/9 fractional digits; account DIDs are
  written in their canonical ``did:odf:f…`` form.

Choices of odf-node where kamu's tests pin nothing: where a string is expected only a YAML
string is taken, a bare ``10`` or ``true`` is refused (kamu writes such strings quoted, so its
output reads back); two map keys that differ only in case are refused, not merged; JSON integers
must fit 64 bits. ``did:pkh`` identifiers are not supported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Final, Generic, TypeAlias, TypeVar

from coordinator.errors import DecodeError, EncodeError, InvalidResource
from coordinator.identity.dataset_id import DID_KEY_PREFIX, DatasetId
from coordinator.metadata.timestamp import Timestamp
from coordinator.metadata.yaml_serde import dump_yaml, load_yaml

# ---------------------------------------------------------------------------------------------
# Identifiers

# grammar.rs: Subdomain = [a-zA-Z0-9]+ ("-" [a-zA-Z0-9]+)*, Hostname = Subdomain ("." Subdomain)*
_SUBDOMAIN: Final = r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*"
_HOSTNAME: Final = re.compile(rf"{_SUBDOMAIN}(?:\.{_SUBDOMAIN})*")
_TYPE_NAME: Final = re.compile(_SUBDOMAIN)
#: A type reference that starts so is a full type URI, anything else a short type name (kamu's
#: ``TypeRef::from_str``).
TYPE_URI_PREFIX: Final = "https:"


@dataclass(frozen=True, slots=True, eq=False)
class _CaselessName:
    """A validated name that compares, hashes and sorts ignoring ASCII case, like kamu's
    ``newtype_str!`` names (dataset and account names are case-insensitive in ODF)."""

    value: str
    _PATTERN: ClassVar[re.Pattern[str]] = _HOSTNAME
    _WHAT: ClassVar[str] = "name"

    def __post_init__(self) -> None:
        if not isinstance(self.value, str) or not self._PATTERN.fullmatch(self.value):
            raise InvalidResource(f"invalid {self._WHAT}: {self.value!r}")

    @property
    def folded(self) -> str:
        """The value lowercased (names are ASCII by their grammar): the key of comparisons."""
        return self.value.lower()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.folded == self.folded

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.folded))

    def __str__(self) -> str:
        return self.value


class ResourceName(_CaselessName):
    """Name of a resource within its owner's scope (a hostname: ``my-secret``, ``a.b``)."""

    __slots__ = ()
    _WHAT = "resource name"


class AccountName(_CaselessName):
    """Name of an account (a hostname: ``sergiimk``)."""

    __slots__ = ()
    _WHAT = "account name"


class TypeName(_CaselessName):
    """Short name of a resource type (``SecretSet``, ``Dataset``): letters, digits, dashes."""

    __slots__ = ()
    _PATTERN = _TYPE_NAME
    _WHAT = "type name"


@dataclass(frozen=True, slots=True)
class TypeUri:
    """Full URI of a resource type (``https://opendatafabric.org/schemas/config/v1alpha1/
    SecretSet``). kamu does not validate it; comparisons are exact."""

    value: str

    def __str__(self) -> str:
        return self.value


#: A short type name or a full type URI.
TypeRef: TypeAlias = TypeUri | TypeName


def parse_type_ref(text: str) -> TypeRef:
    """A :data:`TypeRef` from its text: a URI if it starts with ``https:``, else a type name.

    Raises:
        InvalidResource: not a URI and not a valid type name.
    """
    return TypeUri(text) if text.startswith(TYPE_URI_PREFIX) else TypeName(text)


def _type_ref_order(ref: TypeRef) -> tuple[int, str]:
    # Rust's derived Ord on ``enum TypeRef { Uri, Name }``: every URI before every name.
    return (0, ref.value) if isinstance(ref, TypeUri) else (1, ref.folded)


@dataclass(frozen=True, slots=True)
class ResourceId:
    """Identifier of a resource within a node, assigned on creation (any string today)."""

    value: str

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Did:
    """A resource DID: ``did:odf:…`` (canonical base16) or ``did:key:…`` (base58), ed25519."""

    key: DatasetId
    method: str = "odf"

    def __post_init__(self) -> None:
        if self.method not in ("odf", "key"):
            raise InvalidResource(f"unsupported DID method {self.method!r}")

    @classmethod
    def parse(cls, text: str) -> Did:
        """Parse ``did:odf:<multibase>`` or ``did:key:<multibase>``.

        Raises:
            InvalidDatasetId: a malformed identifier or another DID method.
        """
        if text.startswith(DID_KEY_PREFIX):
            return cls(DatasetId.from_did_key(text), "key")
        return cls(DatasetId.from_did_str(text), "odf")

    def __str__(self) -> str:
        return self.key.as_did_key() if self.method == "key" else self.key.as_did_str()


# ---------------------------------------------------------------------------------------------
# Model (open-data-fabric schemas/{auth,config,resource}/v1alpha1)

#: Any JSON value as read from YAML: ``None`` / bool / int / float / str / list / dict.
YamlValue: TypeAlias = Any

SpecT = TypeVar("SpecT")
SpecU = TypeVar("SpecU")
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountRef:
    """Reference to an account (``auth/v1alpha1/AccountRef``); short form: an account name."""

    id: ResourceId | None = None
    did: DatasetId | None = None
    name: AccountName | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountHandle:
    """A resolved link to an account (``auth/v1alpha1/AccountHandle``)."""

    id: ResourceId
    did: DatasetId
    name: AccountName

    def to_ref(self) -> AccountRef:
        """The reference naming this account by all three of its identifiers."""
        return AccountRef(id=self.id, did=self.did, name=self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceRef:
    """Reference to another resource (``resource/v1alpha1/ResourceRef``).

    Short form ``Type:name`` or ``Type:account/name`` (kamu's ``Grammar::match_resource_ref``).
    """

    account: AccountRef | None = None
    type: TypeRef
    id: ResourceId | None = None
    did: Did | None = None
    name: ResourceName | None = None


def _sorted_map(entries: Mapping[Any, Any], order: Callable[[Any], Any]) -> dict[Any, Any]:
    return dict(sorted(entries.items(), key=lambda kv: order(kv[0])))


@dataclass(frozen=True, slots=True)
class _TypeRefMap:
    """A map keyed by type references with JSON values, kept in kamu's key order."""

    entries: Mapping[TypeRef, YamlValue]

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", _sorted_map(self.entries, _type_ref_order))


class ResourceLabels(_TypeRefMap):
    """Indexed key/value labels of a resource (``resource/v1alpha1/ResourceLabels``)."""

    __slots__ = ()


class ResourceAnnotations(_TypeRefMap):
    """Free-form, unindexed metadata of a resource (``resource/v1alpha1/ResourceAnnotations``)."""

    __slots__ = ()


class ResourceConditions(_TypeRefMap):
    """Controller-reported conditions, keyed by condition type URI
    (``resource/v1alpha1/ResourceConditions``)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceHeadersInput:
    """User-authored identity and ownership (``resource/v1alpha1/ResourceHeadersInput``)."""

    id: ResourceId | None = None
    name: ResourceName
    account: AccountRef | None = None
    labels: ResourceLabels | None = None
    annotations: ResourceAnnotations | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceHeaders:
    """Resolved identity, ownership and lifecycle times (``resource/v1alpha1/ResourceHeaders``)."""

    id: ResourceId
    name: ResourceName
    account: AccountHandle
    labels: ResourceLabels
    annotations: ResourceAnnotations
    generation: int
    created_at: Timestamp
    updated_at: Timestamp
    deleted_at: Timestamp | None = None

    def to_input(self) -> ResourceHeadersInput:
        """The input form: identity, owner, labels and annotations kept, the rest dropped
        (kamu's ``From<ResourceHeaders> for ResourceHeadersInput``)."""
        return ResourceHeadersInput(
            id=self.id,
            name=self.name,
            account=self.account.to_ref(),
            labels=self.labels,
            annotations=self.annotations,
        )


class ResourcePhase(Enum):
    """Lifecycle stage of a resource (``resource/v1alpha1/ResourcePhase``)."""

    PENDING = "Pending"
    RECONCILING = "Reconciling"
    READY = "Ready"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceStatus:
    """Lifecycle and reconciliation state (``resource/v1alpha1/ResourceStatus``)."""

    phase: ResourcePhase
    observed_generation: int | None = None
    reconciled_at: Timestamp | None = None
    conditions: ResourceConditions


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceInput(Generic[SpecT]):
    """A resource as a user writes it (``resource/v1alpha1/ResourceInput``)."""

    schema: TypeUri
    headers: ResourceHeadersInput
    spec: SpecT


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource(Generic[SpecT]):
    """A resource in canonical form (``resource/v1alpha1/Resource``)."""

    schema: TypeUri
    headers: ResourceHeaders
    spec: SpecT
    status: ResourceStatus

    def to_input(self, spec_to_input: Callable[[SpecT], SpecU]) -> ResourceInput[SpecU]:
        """The input form of this resource: status dropped, headers as
        :meth:`ResourceHeaders.to_input`, the spec mapped by ``spec_to_input`` (kamu's
        ``From<Resource<SpecT>> for ResourceInput<SpecTInput>``)."""
        return ResourceInput(
            schema=self.schema, headers=self.headers.to_input(), spec=spec_to_input(self.spec)
        )


@dataclass(frozen=True, slots=True)
class _NameMap(Generic[_V]):
    """A map keyed by names, kept sorted by name."""

    entries: Mapping[str, _V]

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", _sorted_map(self.entries, lambda k: k))


@dataclass(frozen=True, slots=True)
class Secret:
    """One secret, raw or encoded (``config/v1alpha1/Secret``); short form: the raw value."""

    value: str
    content_encoding: str | None = None


class Secrets(_NameMap[Secret]):
    """Named secrets (``config/v1alpha1/Secrets``), kept sorted by name."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Variable:
    """One variable (``config/v1alpha1/Variable``); short form: the value."""

    value: str


class Variables(_NameMap[Variable]):
    """Named variables (``config/v1alpha1/Variables``), kept sorted by name."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class SecretSetSpecInput:
    """Desired state of a ``SecretSet`` as written (``config/v1alpha1/SecretSetSpecInput``)."""

    secrets: Secrets


@dataclass(frozen=True, slots=True)
class SecretSetSpec:
    """Desired state of a ``SecretSet``, canonical (``config/v1alpha1/SecretSetSpec``)."""

    secrets: Secrets

    def to_input(self) -> SecretSetSpecInput:
        """The input form (the same secrets)."""
        return SecretSetSpecInput(self.secrets)


@dataclass(frozen=True, slots=True, kw_only=True)
class RelationInput:
    """A directed relation between two resources (``auth/v1alpha1/RelationInput``).

    ``value`` ``None`` is an absent value (kamu reads an explicit ``null`` as absent too).
    """

    subject: ResourceRef
    relation: str
    value: YamlValue = None
    object: ResourceRef


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributeInput:
    """A named attribute of a resource (``auth/v1alpha1/AttributeInput``)."""

    object: ResourceRef
    name: str
    value: YamlValue


@dataclass(frozen=True, slots=True, kw_only=True)
class RelationsSpecInput:
    """Relations and attributes that auth policies act on (``auth/v1alpha1/RelationsSpecInput``)."""

    relations: tuple[RelationInput, ...] | None = None
    attributes: tuple[AttributeInput, ...] | None = None


_SCHEMAS: Final = "https://opendatafabric.org/schemas"
#: ``$schema`` of the resource types of spec v0.39 that this module models or refers to.
ACCOUNT_SCHEMA: Final = TypeUri(f"{_SCHEMAS}/auth/v1alpha1/Account")
RELATIONS_SCHEMA: Final = TypeUri(f"{_SCHEMAS}/auth/v1alpha1/Relations")
SECRET_SET_SCHEMA: Final = TypeUri(f"{_SCHEMAS}/config/v1alpha1/SecretSet")
VARIABLE_SET_SCHEMA: Final = TypeUri(f"{_SCHEMAS}/config/v1alpha1/VariableSet")

# ---------------------------------------------------------------------------------------------
# Reading: plain data (from load_yaml) -> model. ``path`` names the value in error messages.

T = TypeVar("T")
ValueReader: TypeAlias = Callable[[Any, str], T]

_U64_MAX: Final = (1 << 64) - 1
_I64_MIN: Final = -(1 << 63)


def _fail(path: str, message: str) -> InvalidResource:
    return InvalidResource(f"{path}: {message}" if path else message)


def _type_word(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a sequence" if isinstance(value, list) else "a mapping"


def read_str(value: Any, path: str) -> str:
    """A string, strictly (a bare ``10`` or ``true`` is not one)."""
    if not isinstance(value, str):
        raise _fail(path, f"expected a string, got {_type_word(value)}")
    return value


def _read_u64(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise _fail(path, f"expected an unsigned 64-bit integer, got {value!r}")
    return value


def _read_map(value: Any, path: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"expected a mapping, got {_type_word(value)}")
    return value


def _parsed(path: str, parse: Callable[[str], T], text: str) -> T:
    try:
        return parse(text)
    except DecodeError as e:
        raise _fail(path, str(e)) from None


class _Fields:
    """The fields of a struct, read as kamu's derived ``Deserialize`` with
    ``deny_unknown_fields`` reads them: unknown keys refused, each known key read once."""

    def __init__(self, value: Any, path: str, known: Iterable[str], *, deny_unknown: bool = True):
        self._data = _read_map(value, path)
        self._path = path
        known = tuple(known)
        for key in self._data:
            if deny_unknown and key not in known:
                raise _fail(
                    path, f"unknown field {key!r}, expected one of {', '.join(map(repr, known))}"
                )

    def _sub(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def required(self, key: str, read: ValueReader[T]) -> T:
        """A field that must be present (``null`` is not a value for it)."""
        if key not in self._data:
            raise _fail(self._path, f"missing field {key!r}")
        return read(self._data[key], self._sub(key))

    def optional(self, key: str, read: ValueReader[T]) -> T | None:
        """An ``Option`` field: absent or ``null`` is ``None``."""
        value = self._data.get(key)
        return None if value is None else read(value, self._sub(key))

    def json(self, key: str) -> YamlValue:
        """A required ``serde_json::Value`` field (``null`` is a value)."""
        if key not in self._data:
            raise _fail(self._path, f"missing field {key!r}")
        return read_json(self._data[key], self._sub(key))


def read_json(value: Any, path: str) -> YamlValue:
    """Any JSON value, as kamu's ``serde_json::Value`` takes it from YAML.

    Non-finite floats become ``None`` (JSON has no such numbers; ``serde_json`` makes them
    ``Null``); integers must fit 64 bits; object keys must be strings.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not _I64_MIN <= value <= _U64_MAX:
            raise _fail(path, f"number out of range: {value}")
        return value
    if isinstance(value, float):
        return value if value - value == 0 else None
    if isinstance(value, list):
        return [read_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    out: dict[str, YamlValue] = {}
    for key, item in _read_map(value, path).items():
        if not isinstance(key, str):
            raise _fail(path, f"expected a string key, got {_type_word(key)}")
        out[key] = read_json(item, f"{path}.{key}")
    return out


def _read_keyed(
    value: Any, path: str, read_key: Callable[[str, str], Any], read_value: ValueReader[Any]
) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for raw_key, item in _read_map(value, path).items():
        key_path = f"{path}.{raw_key}"
        key = read_key(read_str(raw_key, f"{path} key"), key_path)
        if key in out:
            raise _fail(key_path, "duplicate key (keys compare case-insensitively)")
        out[key] = read_value(item, key_path)
    return out


def _read_type_ref(value: Any, path: str) -> TypeRef:
    return _parsed(path, parse_type_ref, read_str(value, path))


def _type_ref_map(cls: type[T]) -> ValueReader[T]:
    def read(value: Any, path: str) -> T:
        return cls(_read_keyed(value, path, _read_type_ref, read_json))  # type: ignore[call-arg]

    return read


read_labels: Final[ValueReader[ResourceLabels]] = _type_ref_map(ResourceLabels)
read_annotations: Final[ValueReader[ResourceAnnotations]] = _type_ref_map(ResourceAnnotations)
read_conditions: Final[ValueReader[ResourceConditions]] = _type_ref_map(ResourceConditions)


def _reader(cls: Callable[[str], T]) -> ValueReader[T]:
    def read(value: Any, path: str) -> T:
        return _parsed(path, cls, read_str(value, path))

    return read


_read_resource_id: Final = _reader(ResourceId)
_read_resource_name: Final = _reader(ResourceName)
_read_account_name: Final = _reader(AccountName)
_read_type_uri: Final = _reader(TypeUri)
_read_account_did: Final = _reader(DatasetId.from_did_str)
_read_did: Final = _reader(Did.parse)
_read_timestamp: Final = _reader(Timestamp.parse)


def read_account_ref(value: Any, path: str) -> AccountRef:
    """An :class:`AccountRef`, or its short form: an account name."""
    if isinstance(value, str):
        return AccountRef(name=_read_account_name(value, path))
    f = _Fields(value, path, ("id", "did", "name"))
    return AccountRef(
        id=f.optional("id", _read_resource_id),
        did=f.optional("did", _read_account_did),
        name=f.optional("name", _read_account_name),
    )


def _read_account_handle(value: Any, path: str) -> AccountHandle:
    f = _Fields(value, path, ("id", "did", "name"))
    return AccountHandle(
        id=f.required("id", _read_resource_id),
        did=f.required("did", _read_account_did),
        name=f.required("name", _read_account_name),
    )


_RESOURCE_REF: Final = re.compile(
    rf"(?P<type>{_SUBDOMAIN}):(?:(?P<account>{_HOSTNAME.pattern})/)?(?P<name>{_HOSTNAME.pattern})"
)


def parse_resource_ref(text: str) -> ResourceRef:
    """The short form ``Type:name`` / ``Type:account/name`` of a :class:`ResourceRef`.

    Raises:
        InvalidResource: the text does not have that form.
    """
    m = _RESOURCE_REF.fullmatch(text)
    if m is None:
        raise InvalidResource(f"invalid resource reference {text!r}, expected Type:[account/]name")
    account = m.group("account")
    return ResourceRef(
        account=None if account is None else AccountRef(name=AccountName(account)),
        type=TypeName(m.group("type")),
        name=ResourceName(m.group("name")),
    )


def read_resource_ref(value: Any, path: str) -> ResourceRef:
    """A :class:`ResourceRef`, or its short form (:func:`parse_resource_ref`)."""
    if isinstance(value, str):
        return _parsed(path, parse_resource_ref, value)
    f = _Fields(value, path, ("account", "type", "id", "did", "name"))
    return ResourceRef(
        account=f.optional("account", read_account_ref),
        type=f.required("type", _read_type_ref),
        id=f.optional("id", _read_resource_id),
        did=f.optional("did", _read_did),
        name=f.optional("name", _read_resource_name),
    )


def read_secret(value: Any, path: str) -> Secret:
    """A :class:`Secret`, or its short form: the raw value."""
    if isinstance(value, str):
        return Secret(value)
    f = _Fields(value, path, ("value", "contentEncoding"))
    return Secret(f.required("value", read_str), f.optional("contentEncoding", read_str))


def read_variable(value: Any, path: str) -> Variable:
    """A :class:`Variable`, or its short form: the value."""
    if isinstance(value, str):
        return Variable(value)
    f = _Fields(value, path, ("value",))
    return Variable(f.required("value", read_str))


def read_secrets(value: Any, path: str) -> Secrets:
    """:class:`Secrets`: a mapping of names to secrets (each possibly in short form)."""
    return Secrets(_read_keyed(value, path, lambda key, _: key, read_secret))


def read_variables(value: Any, path: str) -> Variables:
    """:class:`Variables`: a mapping of names to variables (each possibly in short form)."""
    return Variables(_read_keyed(value, path, lambda key, _: key, read_variable))


def _read_headers_input(value: Any, path: str) -> ResourceHeadersInput:
    f = _Fields(value, path, ("id", "name", "account", "labels", "annotations"))
    return ResourceHeadersInput(
        id=f.optional("id", _read_resource_id),
        name=f.required("name", _read_resource_name),
        account=f.optional("account", read_account_ref),
        labels=f.optional("labels", read_labels),
        annotations=f.optional("annotations", read_annotations),
    )


_HEADER_KEYS: Final = (
    "id",
    "name",
    "account",
    "labels",
    "annotations",
    "generation",
    "createdAt",
    "updatedAt",
    "deletedAt",
)


def _read_headers(value: Any, path: str) -> ResourceHeaders:
    f = _Fields(value, path, _HEADER_KEYS)
    return ResourceHeaders(
        id=f.required("id", _read_resource_id),
        name=f.required("name", _read_resource_name),
        account=f.required("account", _read_account_handle),
        labels=f.required("labels", read_labels),
        annotations=f.required("annotations", read_annotations),
        generation=f.required("generation", _read_u64),
        created_at=f.required("createdAt", _read_timestamp),
        updated_at=f.required("updatedAt", _read_timestamp),
        deleted_at=f.optional("deletedAt", _read_timestamp),
    )


# kamu's enum derivations accept the PascalCase name and the all-lowercase one.
_PHASES: Final = {s: p for p in ResourcePhase for s in (p.value, p.value.lower())}


def _read_phase(value: Any, path: str) -> ResourcePhase:
    phase = _PHASES.get(read_str(value, path))
    if phase is None:
        expected = ", ".join(p.value for p in ResourcePhase)
        raise _fail(path, f"unknown variant {value!r}, expected one of {expected}")
    return phase


def _read_status(value: Any, path: str) -> ResourceStatus:
    f = _Fields(value, path, ("phase", "observedGeneration", "reconciledAt", "conditions"))
    return ResourceStatus(
        phase=f.required("phase", _read_phase),
        observed_generation=f.optional("observedGeneration", _read_u64),
        reconciled_at=f.optional("reconciledAt", _read_timestamp),
        conditions=f.required("conditions", read_conditions),
    )


def _read_relation_input(value: Any, path: str) -> RelationInput:
    f = _Fields(value, path, ("subject", "relation", "value", "object"))
    return RelationInput(
        subject=f.required("subject", read_resource_ref),
        relation=f.required("relation", read_str),
        value=f.optional("value", read_json),
        object=f.required("object", read_resource_ref),
    )


def _read_attribute_input(value: Any, path: str) -> AttributeInput:
    f = _Fields(value, path, ("object", "name", "value"))
    return AttributeInput(
        object=f.required("object", read_resource_ref),
        name=f.required("name", read_str),
        value=f.json("value"),
    )


def _read_seq(read: ValueReader[T]) -> ValueReader[tuple[T, ...]]:
    def read_all(value: Any, path: str) -> tuple[T, ...]:
        if not isinstance(value, list):
            raise _fail(path, f"expected a sequence, got {_type_word(value)}")
        return tuple(read(item, f"{path}[{i}]") for i, item in enumerate(value))

    return read_all


# ---------------------------------------------------------------------------------------------
# Writing: model -> plain data (for dump_yaml), fields in declaration order, None omitted.


def _struct(*pairs: tuple[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in pairs if value is not None}


def sorted_json(value: YamlValue) -> YamlValue:
    """A JSON value with every object's keys sorted, as kamu's ``serde_json`` writes it."""
    if isinstance(value, dict):
        return {k: sorted_json(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [sorted_json(v) for v in value]
    return value


def _account_ref_data(ref: AccountRef) -> dict[str, Any]:
    return _struct(
        ("id", ref.id and ref.id.value),
        ("did", ref.did and ref.did.as_did_str()),
        ("name", ref.name and ref.name.value),
    )


def _account_handle_data(handle: AccountHandle) -> dict[str, Any]:
    return _account_ref_data(handle.to_ref())


def resource_ref_data(ref: ResourceRef) -> dict[str, Any]:
    """A :class:`ResourceRef` as plain data: always the struct, as kamu writes it."""
    return _struct(
        ("account", ref.account and _account_ref_data(ref.account)),
        ("type", ref.type.value),
        ("id", ref.id and ref.id.value),
        ("did", ref.did and str(ref.did)),
        ("name", ref.name and ref.name.value),
    )


def type_ref_map_data(m: _TypeRefMap) -> dict[str, Any]:
    """Labels, annotations or conditions as plain data: keys in order, JSON keys sorted."""
    return {key.value: sorted_json(value) for key, value in m.entries.items()}


def secrets_data(secrets: Secrets) -> dict[str, Any]:
    """:class:`Secrets` as plain data (every secret as a struct)."""
    return {
        name: _struct(("value", s.value), ("contentEncoding", s.content_encoding))
        for name, s in secrets.entries.items()
    }


def variables_data(variables: Variables) -> dict[str, Any]:
    """:class:`Variables` as plain data (every variable as a struct)."""
    return {name: {"value": v.value} for name, v in variables.entries.items()}


def _headers_input_data(h: ResourceHeadersInput) -> dict[str, Any]:
    return _struct(
        ("id", h.id and h.id.value),
        ("name", h.name.value),
        ("account", h.account and _account_ref_data(h.account)),
        ("labels", h.labels and type_ref_map_data(h.labels)),
        ("annotations", h.annotations and type_ref_map_data(h.annotations)),
    )


def _time(t: Timestamp | None) -> str | None:
    return None if t is None else t.to_rfc3339()


def _headers_data(h: ResourceHeaders) -> dict[str, Any]:
    return _struct(
        ("id", h.id.value),
        ("name", h.name.value),
        ("account", _account_handle_data(h.account)),
        ("labels", type_ref_map_data(h.labels)),
        ("annotations", type_ref_map_data(h.annotations)),
        ("generation", h.generation),
        ("createdAt", _time(h.created_at)),
        ("updatedAt", _time(h.updated_at)),
        ("deletedAt", _time(h.deleted_at)),
    )


def _status_data(s: ResourceStatus) -> dict[str, Any]:
    return _struct(
        ("phase", s.phase.value),
        ("observedGeneration", s.observed_generation),
        ("reconciledAt", _time(s.reconciled_at)),
        ("conditions", type_ref_map_data(s.conditions)),
    )


# ---------------------------------------------------------------------------------------------
# Spec codecs and the documents


@dataclass(frozen=True, slots=True)
class SpecCodec(Generic[SpecT]):
    """How a resource's ``spec`` is read from and written to plain YAML data: the type
    parameter of kamu's ``ResourceInput<SpecT>`` / ``Resource<SpecT>``."""

    name: str
    read: Callable[[Any, str], SpecT]
    write: Callable[[SpecT], Any] | None


class Ignored(Enum):
    """The spec of a resource read with :data:`IGNORED_SPEC` (kamu's ``IgnoredAny``)."""

    IGNORED = "ignored"


def _write_ignored(_: Ignored) -> Any:
    raise EncodeError("a resource read with IGNORED_SPEC has no spec to write")


#: Reads the headers only: the spec must be present, its content is not looked at.
IGNORED_SPEC: Final[SpecCodec[Ignored]] = SpecCodec(
    "IgnoredAny", lambda _v, _p: Ignored.IGNORED, _write_ignored
)
#: The spec as any JSON value (object keys written sorted).
JSON_SPEC: Final[SpecCodec[YamlValue]] = SpecCodec("Value", read_json, sorted_json)


def _read_secret_set_spec_input(value: Any, path: str) -> SecretSetSpecInput:
    return SecretSetSpecInput(_Fields(value, path, ("secrets",)).required("secrets", read_secrets))


def _read_secret_set_spec(value: Any, path: str) -> SecretSetSpec:
    return SecretSetSpec(_Fields(value, path, ("secrets",)).required("secrets", read_secrets))


def _read_relations_spec_input(value: Any, path: str) -> RelationsSpecInput:
    f = _Fields(value, path, ("relations", "attributes"))
    return RelationsSpecInput(
        relations=f.optional("relations", _read_seq(_read_relation_input)),
        attributes=f.optional("attributes", _read_seq(_read_attribute_input)),
    )


def _relation_input_data(r: RelationInput) -> dict[str, Any]:
    return _struct(
        ("subject", resource_ref_data(r.subject)),
        ("relation", r.relation),
        ("value", None if r.value is None else sorted_json(r.value)),
        ("object", resource_ref_data(r.object)),
    )


def _attribute_input_data(a: AttributeInput) -> dict[str, Any]:
    # ``value`` is required: a JSON null is written as ``null``.
    return {"object": resource_ref_data(a.object), "name": a.name, "value": sorted_json(a.value)}


def _relations_spec_input_data(spec: RelationsSpecInput) -> dict[str, Any]:
    relations = spec.relations
    attributes = spec.attributes
    return _struct(
        ("relations", None if relations is None else [_relation_input_data(r) for r in relations]),
        (
            "attributes",
            None if attributes is None else [_attribute_input_data(a) for a in attributes],
        ),
    )


SECRET_SET_SPEC_INPUT: Final[SpecCodec[SecretSetSpecInput]] = SpecCodec(
    "SecretSetSpecInput",
    _read_secret_set_spec_input,
    lambda spec: {"secrets": secrets_data(spec.secrets)},
)
SECRET_SET_SPEC: Final[SpecCodec[SecretSetSpec]] = SpecCodec(
    "SecretSetSpec", _read_secret_set_spec, lambda spec: {"secrets": secrets_data(spec.secrets)}
)
RELATIONS_SPEC_INPUT: Final[SpecCodec[RelationsSpecInput]] = SpecCodec(
    "RelationsSpecInput", _read_relations_spec_input, _relations_spec_input_data
)


def _write_spec(codec: SpecCodec[SpecT], spec: SpecT) -> Any:
    if codec.write is None:
        raise EncodeError(f"spec type {codec.name} cannot be written")
    return codec.write(spec)


def resource_input_from_data(data: Any, spec: SpecCodec[SpecT]) -> ResourceInput[SpecT]:
    """A :class:`ResourceInput` from plain data (see :func:`resource_input_from_yaml`)."""
    f = _Fields(data, "", ("$schema", "headers", "spec"))
    return ResourceInput(
        schema=f.required("$schema", _read_type_uri),
        headers=f.required("headers", _read_headers_input),
        spec=f.required("spec", spec.read),
    )


def resource_input_from_yaml(text: str | bytes, spec: SpecCodec[SpecT]) -> ResourceInput[SpecT]:
    """Read a resource as a user writes it, its ``spec`` with ``spec``.

    Raises:
        DecodeError: malformed YAML (:func:`~coordinator.metadata.yaml_serde.load_yaml`);
            :class:`~coordinator.errors.InvalidResource` for a resource that does not match
            the schema (unknown or missing field, wrong type, invalid name or reference).
    """
    return resource_input_from_data(load_yaml(text), spec)


def resource_input_to_data(value: ResourceInput[SpecT], spec: SpecCodec[SpecT]) -> dict[str, Any]:
    """A :class:`ResourceInput` as plain data, fields in kamu's order."""
    return {
        "$schema": value.schema.value,
        "headers": _headers_input_data(value.headers),
        "spec": _write_spec(spec, value.spec),
    }


def resource_input_to_yaml(value: ResourceInput[SpecT], spec: SpecCodec[SpecT]) -> str:
    """The YAML kamu writes for ``value`` (``serde_yaml::to_string``), text for text.

    Raises:
        EncodeError: the spec codec cannot write (:data:`IGNORED_SPEC`).
    """
    return dump_yaml(resource_input_to_data(value, spec))


def resource_from_data(data: Any, spec: SpecCodec[SpecT]) -> Resource[SpecT]:
    """A canonical :class:`Resource` from plain data (see :func:`resource_from_yaml`)."""
    f = _Fields(data, "", ("$schema", "headers", "spec", "status"))
    return Resource(
        schema=f.required("$schema", _read_type_uri),
        headers=f.required("headers", _read_headers),
        spec=f.required("spec", spec.read),
        status=f.required("status", _read_status),
    )


def resource_from_yaml(text: str | bytes, spec: SpecCodec[SpecT]) -> Resource[SpecT]:
    """Read a resource in canonical form, its ``spec`` with ``spec``.

    Raises:
        DecodeError: as :func:`resource_input_from_yaml`.
    """
    return resource_from_data(load_yaml(text), spec)


def resource_to_data(value: Resource[SpecT], spec: SpecCodec[SpecT]) -> dict[str, Any]:
    """A canonical :class:`Resource` as plain data, fields in kamu's order."""
    return {
        "$schema": value.schema.value,
        "headers": _headers_data(value.headers),
        "spec": _write_spec(spec, value.spec),
        "status": _status_data(value.status),
    }


def resource_to_yaml(value: Resource[SpecT], spec: SpecCodec[SpecT]) -> str:
    """The YAML kamu writes for a canonical resource, text for text."""
    return dump_yaml(resource_to_data(value, spec))
