export { QueueCore, resolveBaseURL, DEFAULT_BASE_URL, ENV_API_KEY, ENV_BASE_URL } from './client.js';
export type { ClientOptions } from './client.js';
export {
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT,
  INITIAL_RETRY_DELAY,
  MAX_RETRY_AFTER,
  MAX_RETRY_DELAY,
  APIClient,
} from './core/api-client.js';
export type { Fetch, Logger, FinalRequestOptions, APIResponse } from './core/api-client.js';
export { ConsumedMessage, Consumer } from './core/consumer.js';
export type { ConsumeOptions, ConsumerEvents, ErrorHandler, MessageHandler, RebalanceHandler } from './core/consumer.js';
export {
  AckError,
  APIConnectionError,
  APIError,
  APIResponseValidationError,
  APIStatusError,
  APITimeoutError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  InternalServerError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  QueueCoreError,
  RateLimitError,
  ServiceUnavailableError,
  parseRateLimit,
} from './core/error.js';
export type { ErrorDetail, RateLimit } from './core/error.js';
export { PagedList } from './core/pagination.js';
export { defaultOpener, wsOpener, WebSocketUnavailableError } from './core/websocket.js';
export type { OpenSocket, Socket, SocketEvents } from './core/websocket.js';
export { BatchMessage } from './resources/messages.js';
export { Topics } from './resources/topics.js';
export { Messages } from './resources/messages.js';
export { ConsumerGroups } from './resources/consumer-groups.js';
export { Offsets } from './resources/offsets.js';
export type { SeekParams } from './resources/offsets.js';
export { Dlq } from './resources/dlq.js';
export { Alerts } from './resources/alerts.js';
export { Schedules } from './resources/schedules.js';
export { DEFAULT_WEBHOOK_TOLERANCE, signWebhook, verifyWebhook, WebhookVerificationError } from './webhooks.js';
export type { VerifyWebhookOptions, WebhookHeaders } from './webhooks.js';
export type * from './types.js';
export { VERSION } from './version.js';
export { QueueCore as default } from './client.js';
