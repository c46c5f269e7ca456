"""Security administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31),
DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

As in Kafka: describing needs DESCRIBE on the cluster and changing needs ALTER (else
CLUSTER_AUTHORIZATION_FAILED); the ACL APIs answer SECURITY_DISABLED when no authorizer is
configured (``authorizer.class.name``; ``databus acls --data-dir`` edits the store of a
stopped broker).  SCRAM credentials arrive salted (the client derives the salted password);
the broker keeps only StoredKey and ServerKey (credentials.py).  Fewer than 4096 or more than
16384 iterations is UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
an unknown user RESOURCE_NOT_FOUND, a user named twice in one request DUPLICATE_RESOURCE.
"""

from __future__ import annotations

import datetime
import logging
from collections import Counter

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.sasl import (
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    credential_from_salted,
)
from databus.storage.acls import (
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

from ..api import RequestContext, handles

log = logging.getLogger(__name__)
NO_THROTTLE = datetime.timedelta(0)


def _gate(ctx: RequestContext, operation: Operation) -> tuple[ErrorCode, str | None]:
    if not ctx.broker.authorizer.enabled:
        return ErrorCode.security_disabled, "no authorizer is configured (authorizer.class.name)"
    if not ctx.cluster_allowed(operation):
        return ErrorCode.cluster_authorization_failed, None
    return ErrorCode.none, None


def _filter(item) -> AclFilter:
    try:
        return AclFilter(
            ResourceType(item.resource_type_filter), item.resource_name_filter,
            PatternType(item.pattern_type_filter), item.principal_filter, item.host_filter,
            Operation(item.operation), Permission(item.permission_type),
        ).validate()
    except ValueError as exc:
        raise AclError(str(exc)) from None


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    code, message = _gate(ctx, Operation.DESCRIBE)
    resources = []
    if code == ErrorCode.none:
        try:
            found = ctx.broker.acls.describe(_filter(request))
        except AclError as exc:
            code, message, found = ErrorCode.invalid_request, str(exc), []
        groups: dict[tuple, list[AclBinding]] = {}
        for acl in found:
            key = (acl.resource_type, acl.resource_name, acl.pattern_type)
            groups.setdefault(key, []).append(acl)
        for (rtype, name, pattern), acls in groups.items():
            resources.append(build(
                module.DescribeAclsResource, resource_type=int(rtype), resource_name=name,
                pattern_type=int(pattern),
                acls=[build(module.AclDescription, principal=a.principal, host=a.host,
                            operation=int(a.operation), permission_type=int(a.permission))
                      for a in acls]))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, error_code=code,
                 error_message=message, resources=tuple(resources))


@handles(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    code, message = _gate(ctx, Operation.ALTER)
    results = []
    valid: list[AclBinding] = []
    for item in request.creations:
        item_code, item_message = code, message
        if code == ErrorCode.none:
            try:
                binding = AclBinding(
                    ResourceType(item.resource_type), item.resource_name,
                    PatternType(item.resource_pattern_type), item.principal, item.host,
                    Operation(item.operation), Permission(item.permission_type)).validate()
                valid.append(binding)
            except ValueError as exc:  # AclError, or a number no enum member has
                item_code, item_message = ErrorCode.invalid_request, str(exc)
        results.append(build(module.AclCreationResult, error_code=item_code,
                             error_message=item_message))
    if valid:
        ctx.broker.acls.add(valid)
        log.info("%s added %d ACL(s)", ctx.session.principal, len(valid))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, results=tuple(results))


@handles(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    code, message = _gate(ctx, Operation.ALTER)
    results = []
    for item in request.filters:
        matching = []
        item_code, item_message = code, message
        if code == ErrorCode.none:
            try:
                gone = ctx.broker.acls.delete(_filter(item))
            except AclError as exc:
                item_code, item_message, gone = ErrorCode.invalid_request, str(exc), []
            matching = [build(
                module.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                resource_type=int(a.resource_type), resource_name=a.resource_name,
                pattern_type=int(a.pattern_type), principal=a.principal, host=a.host,
                operation=int(a.operation), permission_type=int(a.permission)) for a in gone]
            if gone:
                log.info("%s deleted %d ACL(s)", ctx.session.principal, len(gone))
        results.append(build(module.DeleteAclsFilterResult, error_code=item_code,
                             error_message=item_message, matching_acls=matching))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, filter_results=tuple(results))


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    if not ctx.cluster_allowed(Operation.DESCRIBE):
        return build(ctx.response_class(), throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    users = ctx.broker.credentials.users()
    names = sorted(users) if request.users is None else [u.name for u in request.users]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        code, message, infos = ErrorCode.none, None, []
        if counts[name] > 1:
            code, message = ErrorCode.duplicate_resource, f"user {name!r} named twice"
        elif name not in users:
            code, message = ErrorCode.resource_not_found, f"no SCRAM credential for {name!r}"
        else:
            infos = [build(module.CredentialInfo, mechanism=MECHANISM_CODES[mech],
                           iterations=cred.iterations)
                     for mech, cred in sorted(users[name].items())]
        results.append(build(module.DescribeUserScramCredentialsResult, user=name,
                             error_code=code, error_message=message, credential_infos=infos))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, results=tuple(results))


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    store = ctx.broker.credentials
    allowed = ctx.cluster_allowed(Operation.ALTER)
    counts = Counter([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    results = []

    def result(user: str, code: ErrorCode = ErrorCode.none, message: str | None = None):
        results.append(build(module.AlterUserScramCredentialsResult, user=user,
                             error_code=code, error_message=message))

    for deletion in request.deletions:
        mechanism = MECHANISM_NAMES.get(deletion.mechanism)
        if not allowed:
            result(deletion.name, ErrorCode.cluster_authorization_failed)
        elif counts[deletion.name] > 1:
            result(deletion.name, ErrorCode.duplicate_resource, "user named twice")
        elif mechanism is None:
            result(deletion.name, ErrorCode.unsupported_sasl_mechanism,
                   f"unknown SCRAM mechanism {deletion.mechanism}")
        elif not store.delete(deletion.name, mechanism):
            result(deletion.name, ErrorCode.resource_not_found,
                   f"no {mechanism} credential for {deletion.name!r}")
        else:
            log.info("%s deleted the %s credential of %r", ctx.session.principal, mechanism,
                     deletion.name)
            result(deletion.name)
    for upsertion in request.upsertions:
        mechanism = MECHANISM_NAMES.get(upsertion.mechanism)
        if not allowed:
            result(upsertion.name, ErrorCode.cluster_authorization_failed)
        elif counts[upsertion.name] > 1:
            result(upsertion.name, ErrorCode.duplicate_resource, "user named twice")
        elif mechanism is None:
            result(upsertion.name, ErrorCode.unsupported_sasl_mechanism,
                   f"unknown SCRAM mechanism {upsertion.mechanism}")
        elif not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
            result(upsertion.name, ErrorCode.unacceptable_credential,
                   f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        elif not upsertion.name or not upsertion.salt or not upsertion.salted_password:
            result(upsertion.name, ErrorCode.unacceptable_credential,
                   "a user name, a salt and a salted password are required")
        else:
            store.upsert(upsertion.name, credential_from_salted(
                mechanism, bytes(upsertion.salt), upsertion.iterations,
                bytes(upsertion.salted_password)))
            log.info("%s set the %s credential of %r", ctx.session.principal, mechanism,
                     upsertion.name)
            result(upsertion.name)
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, results=tuple(results))
