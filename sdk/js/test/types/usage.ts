// Type-checked (never run): the public API through the package's own name, so tsc reads the published
// .d.ts via the exports map (ESM side). usage.cts does the same from CommonJS.
import QueueCoreDefault, {
  QueueCore,
  BatchMessage,
  NotFoundError,
  RateLimitError,
  APIError,
  type BatchResult,
  type ConsumedMessage,
  type ConsumerGroup,
  type ConsumerGroupSummary,
  type DeadLetterPage,
  type Health,
  type Offset,
  type PartitionOffset,
  type PublishResult,
  type RebalanceEvent,
  type Topic,
  type TopicDetail,
  type Replicas,
} from '@queuecore/sdk';

interface Order {
  type: string;
  orderId: string;
  amount?: number;
}

async function main(): Promise<void> {
  const pq = new QueueCore({ apiKey: process.env.QUEUECORE_API_KEY, region: 'us-east-1', timeout: 10_000, maxRetries: 3, logger: console });
  const same: QueueCore = new QueueCoreDefault({ apiKey: 'k' });
  void same;

  const topic: Topic = await pq.topics.create({ name: 'order.events', retention: '30d', delivery: 'exactly-once', partitions: 6, replicas: 3 });
  const copies: Replicas = topic.replicas;
  console.log(copies satisfies number);
  // @ts-expect-error replicas is 1, 3 or 5
  await pq.topics.create({ name: 'order.events', replicas: 2 });
  const topics: Topic[] = await pq.topics.list();
  const flow: ConsumerGroup = await pq.consumerGroups.update('order.events', 'g', {
    maxInFlight: 500,
    rate: 2.5,
    filter: 'headers.type IN ("order.created", "order.paid")',
  });
  const limits: [number | null, number | null, string | null] = [flow.config.maxInFlight, flow.config.rate, flow.config.filter];
  console.log(limits, flow.filterAppliesFrom?.[0]?.offset);
  await pq.consumerGroups.update('order.events', 'g', { maxInFlight: null, rate: null, filter: null });
  // @ts-expect-error a rate is a number of messages per second
  await pq.consumerGroups.update('order.events', 'g', { rate: 'fast' });
  for await (const t of pq.topics.list({ limit: 10 })) console.log(t.name satisfies string);
  const detail: TopicDetail = await pq.topics.describe(topic.name);
  console.log(detail.partitionDetails[0]?.latestOffset, topics.length);
  for (const copy of detail.partitionDetails[0]?.replicas ?? []) {
    const where: [string, string | null | undefined, boolean, number | null | undefined] = [copy.server, copy.zone, copy.leader, copy.lag];
    console.log(where);
  }
  await pq.topics.update('order.events', { partitions: 8 });

  const result: PublishResult = await pq.publish('order.events', { type: 'order.created', orderId: 'ord_92jf8x' });
  console.log(result.offset, result.partition, result.timestamp, result.latency, result.durability);
  const results: BatchResult = await pq.publishBatch('order.events', [
    { type: 'order.created', orderId: 'ord_a1b2c3', amount: 4500 },
    new BatchMessage({ data: { orderId: 'x' }, key: 'x', idempotencyKey: 'k' }),
  ]);
  console.log(results.count, results.latency, results.messages[0]?.id);

  const consumer = pq.consume<Order>('order.events', { group: 'order-processing', startFrom: 'latest', maxInFlight: 50 });
  consumer.on('message', async (msg: ConsumedMessage<Order>) => {
    const id: string = msg.data.orderId;
    console.log(id, msg.offset, msg.topic, msg.partition, msg.attempt);
    await msg.ack();
    await msg.nack('bad', { delay: '5s' });
    await msg.extend(30);
  });
  consumer.on('error', (err: Error) => console.error('Consumer error:', err.message));
  consumer.on('rebalance', (event: RebalanceEvent) => console.log(event.assignments));
  await consumer.start();
  await consumer.stop();
  for await (const msg of pq.consume('order.events', { group: 'g', transport: 'pull', deadLetter: { maxRetries: 5, retryDelay: '30s', alertThreshold: 100 } })) {
    await msg.ack();
    break;
  }

  const groups: ConsumerGroupSummary[] = await pq.consumerGroups.list('order.events');
  const group: ConsumerGroup = await pq.consumerGroups.describe('order.events', 'order-processing');
  console.log(groups[0]?.lag, group.partitions[0]?.consumer, group.config.deadLetter?.maxRetries);
  await pq.consumerGroups.resetOffsets('order.events', 'order-processing', { to: 'earliest' });

  const dead: DeadLetterPage = await pq.dlq.inspect('order.events', { group: 'order-processing', limit: 10 });
  console.log(dead.total, dead.data[0]?.reason);
  await pq.dlq.replay('order.events', 'order-processing', { messageId: 'msg_x8k2n4' });
  await pq.dlq.replayAll('order.events', 'order-processing');

  const offset: Offset = await pq.offsets.get('order.events', { group: 'order-processing', partition: 0 });
  const all: PartitionOffset[] = await pq.offsets.get('order.events', { group: 'order-processing' });
  console.log(offset.lag, all.length);
  await pq.offsets.seek('order.events', { group: 'order-processing', partition: 0, offset: 4800 });
  await pq.offsets.seek('order.events', { group: 'order-processing', partition: 0, timestamp: new Date() });
  await pq.offsets.reset('order.events', { group: 'order-processing', to: 'earliest' });

  const health: Health = await pq.health();
  console.log(health.status === 'down', health.checks['database']);

  try {
    await pq.topics.describe('user.events');
  } catch (err) {
    if (err instanceof NotFoundError) console.log(err.code, err.status, err.requestId);
    else if (err instanceof RateLimitError) console.log(err.retryAfter);
    else if (err instanceof APIError) console.log(err.message);
  }
}

void main;
